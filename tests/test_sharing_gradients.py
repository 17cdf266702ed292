"""What each sharing method's loss does to a peer row's gradient, through TRL 1.16's own loss (``_compute_loss``) and
the trainer's ``compute_loss``, by autograd, against the documented formula computed by hand beside each test.

The model's forward is replaced by a leaf tensor of per-token log-probs ``logp`` (TRL's
``_get_per_token_logps_and_entropies`` returns it), so ``d loss / d logp_t`` is read directly. With ``loss_type:
grpo`` over ``B`` rows the loss is ``(1/B) Σ_b (1/L_b) Σ_t ℓ_bt``, so a token's effective gradient weight, the factor
``g_t`` in ``∇ = g_t · A · ∇log π_θ(y_t)``, is ``-(d loss / d logp_t) · B · L / A``. Everything is at the snapshot
(the log-probs equal the learner's own at generation), unless a test moves them.

Peer row, 4 tokens, importance weights ``w = π_snapshot / π_peer = [0.5, 2, 5, 20]`` (below, inside-ish and above
TRL's clip band ``[0.8, 1.2]``), ``C = 3``, drop line ``D = 10``, both advantage signs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from mutualrl.assets.tokenizers import load_tokenizer
from mutualrl.config import load_run_config
from mutualrl.regimes.hacpo.adapter import COEFFICIENT, PEER_LOGPS, PEER_ROW, SOURCE_TOKENS, HACPOAdapter
from mutualrl.regimes.core.pooled_rows import PooledStep
from mutualrl.regimes.prp.adapter import PRPAdapter
from mutualrl.regimes.core.trainer_interface import TOKEN_WEIGHTS
from mutualrl.training.trainer import MutualGRPOTrainer
from test_regime_token_weights import WeightsFromBatch
from tiny_models import build_tiny_lm

W = np.array([0.5, 2.0, 5.0, 20.0])
SNAPSHOT = np.array([-1.0, -0.7, -1.3, -0.9])  # the learner's log-probs of the peer row's tokens at generation
OWN = np.array([-0.4, -0.6, -0.8, -1.0])  # the learner's own row (advantage 0: it moves nothing)
EPS, C, D = 0.2, 3.0, 10.0


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grad")
    args = GRPOConfig(output_dir=str(folder / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=4, max_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, seed=7, loss_type="grpo", beta=0.0, epsilon=EPS)
    config = load_run_config("tiny", regime="standalone", check_grpo=False).config
    rows = [{"prompt": "1+1=", "answer": "2", "prompt_id": "p", "task": "t"}] * 4
    built = MutualGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(build_tiny_lm("gpt2", folder / "model")),
                              reward_funcs=lambda **_: [0.0], args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=load_tokenizer("gpt2"), policy_name="tiny-bpe",
                              regime=WeightsFromBatch(config, "tiny-bpe", exchange=None))
    built.current_gradient_accumulation_steps = 1
    return built


def gradient(trainer, monkeypatch, batch: dict, logps: np.ndarray) -> np.ndarray:
    """``d loss / d logp`` ``[B, T]`` of the trainer's loss with the forward's log-probs set to ``logps``."""
    leaf = torch.tensor(logps, dtype=torch.float32, requires_grad=True)  # [B, T]

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        return leaf, torch.zeros_like(leaf), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    trainer.compute_loss(trainer.model, batch).backward()
    return leaf.grad.double().numpy()


def base_batch(advantages: list[float]) -> dict:
    rows = len(advantages)
    return {"prompt_ids": torch.full((rows, 2), 5), "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
            "completion_ids": torch.full((rows, 4), 9), "completion_mask": torch.ones(rows, 4, dtype=torch.long),
            "advantages": torch.tensor(advantages), "num_items_in_batch": torch.tensor(4 * rows)}


def prp_batch(advantage: float, level: str = "token", **settings) -> dict:
    """The batch PRP's adapter makes of one own row and the peer row: its ratio denominators and token weights."""
    config = load_run_config("tiny", regime="prp", check_grpo=False).config
    settings.setdefault("kl_over", "tokens")  # F-TIS's KL of the sampled tokens: the figures below are per token
    config.regime.prp = replace(config.regime.prp, correction_level=level, truncation_bound=C, drop_bound=D,
                                **settings)
    adapter = PRPAdapter(config, "tiny-bpe", exchange=None)
    snapshot = torch.tensor(np.stack([OWN, SNAPSHOT]), dtype=torch.float32)  # [2, 4]
    batch = base_batch([0.0, advantage])
    step = PooledStep(batch=batch, n_local=1, width=4, sources=[("tiny-sp", 0)], responses=None,
                   peer_mask=torch.ones(1, 4, dtype=torch.long), scored=torch.tensor([True]), snapshot=snapshot,
                   peer_traces=snapshot[1:] - torch.log(torch.tensor(W, dtype=torch.float32)), behaviour=None)
    batch["old_per_token_logps"] = adapter.behaviour_logps(step)
    step.kept = adapter.rows_kept(step)  # as PRPAdapter.transform does
    weights = adapter.peer_token_weights(step)
    if weights is not None:
        batch[TOKEN_WEIGHTS] = torch.cat([torch.ones(1, 4), weights])  # [2, 4]
    return batch


def peer_weight(grad: np.ndarray, advantage: float) -> np.ndarray:
    """The effective gradient weight of the peer row's tokens (row 1): ``-grad · B · L / A``."""
    return -grad[1] * 2 * 4 / advantage


# -- the documented formulas, by hand -----------------------------------------------------------------------------
def ppo_clip(w: np.ndarray, advantage: float) -> np.ndarray:
    """TRL's -min(r A, clip(r) A) at r = w: the gradient weight is r where the unclipped term is the minimum."""
    return np.where(w <= 1 + EPS, w, 0.0) if advantage > 0 else np.where(w >= 1 - EPS, w, 0.0)


HAND = {  # (settings, A) -> per-token gradient weight on the peer row
    ("none/learner", 1.0): np.array([1.0, 1.0, 1.0, 1.0]),  # naive PRP: ratio 1 at the snapshot
    ("none/learner", -1.0): np.array([1.0, 1.0, 1.0, 1.0]),
    ("none/peer", 1.0): np.array([0.5, 0.0, 0.0, 0.0]),  # the paper's corrected PRP: TRL's clip on w itself
    ("none/peer", -1.0): np.array([0.0, 2.0, 5.0, 20.0]),
    ("tis", 1.0): np.array([0.5, 2.0, 3.0, 3.0]),  # min(w, C), both signs
    ("tis", -1.0): np.array([0.5, 2.0, 3.0, 3.0]),
    ("tis-drop", 1.0): np.array([0.5, 2.0, 3.0, 0.0]),  # 0 above D, else min(w, C)
    ("tis-drop", -1.0): np.array([0.5, 2.0, 3.0, 0.0]),
    ("ftis", 1.0): np.array([0.5, 2.0, 3.0, 3.0]),  # F-TIS's truncation; the sample's KL (45.50) < g = 50: kept
    ("ftis", -1.0): np.array([0.5, 2.0, 3.0, 3.0]),
}


@pytest.mark.parametrize("advantage", [1.0, -1.0])
@pytest.mark.parametrize("case", ["none/learner", "none/peer", "tis", "tis-drop", "ftis"])
def test_prp_token_level_gradient_weights(trainer, monkeypatch, case, advantage):
    correction, _, denominator = case.partition("/")
    batch = prp_batch(advantage, correction=correction, denominator=denominator or "peer")
    got = peer_weight(gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT])), advantage)
    np.testing.assert_allclose(got, HAND[(case, advantage)], rtol=1e-5, atol=1e-6)
    if case == "none/peer":  # the hand table is TRL's clip rule itself
        np.testing.assert_allclose(HAND[(case, advantage)], ppo_clip(W, advantage))


def test_ftis_drops_a_negative_advantage_sample_past_the_kl_bound_only(trainer, monkeypatch):
    """The sample's KL(π_θ ‖ π_gen) estimate (the default, rlogr-sum), Σ_t w log w − w + 1 with w = π_θ/π_gen:
    (−.347 − .5 + 1) + (1.386 − 2 + 1) + (8.047 − 5 + 1) + (59.915 − 20 + 1) = 45.502. With g = 45: A < 0 is dropped
    (weight 0), A > 0 is kept; with g = 46 both are kept. k3-sum, Σ_t 1/w + log w − 1 = 3.355, keeps it at g = 45."""
    kl = float(np.sum(W * np.log(W) - W + 1))
    assert kl == pytest.approx(45.502, abs=1e-3)
    assert float(np.sum(1 / W + np.log(W) - 1)) == pytest.approx(3.355, abs=1e-3)
    for advantage, bound, estimator, expected in ((-1.0, 45.0, "rlogr-sum", np.zeros(4)),
                                                  (1.0, 45.0, "rlogr-sum", np.minimum(W, C)),
                                                  (-1.0, 46.0, "rlogr-sum", np.minimum(W, C)),
                                                  (-1.0, 45.0, "k3-sum", np.minimum(W, C))):
        batch = prp_batch(advantage, correction="ftis", kl_bound=bound, kl_estimator=estimator)
        got = peer_weight(gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT])), advantage)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("trl_level", ["token", "sequence"])
@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_sequence_level_corrections_weigh_by_t_of_w_under_either_ratio(trainer, monkeypatch, trl_level, advantage):
    """Sequence level: W = Π w = 0.5·2·5·20 = 100 > C: TIS and F-TIS weigh every token by 3, under TRL's token ratio
    and under GSPO's sequence ratio alike (both 1 at the snapshot); the drop line D = 10 drops the response. Without a correction under GSPO and the peer denominator,
    TRL's ratio is W^(1/4) = 3.1623 (the paper's PRP with GSPO): clipped for A > 0, the weight itself for A < 0."""
    monkeypatch.setattr(trainer, "importance_sampling_level", trl_level)
    for correction, expected in (("tis", C), ("ftis", C), ("tis-drop", 0.0)):  # W = 100 > D = 10: dropped
        batch = prp_batch(advantage, level="sequence", correction=correction)
        got = peer_weight(gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT])), advantage)
        np.testing.assert_allclose(got, np.full(4, expected), rtol=1e-5, atol=1e-6)
    if trl_level == "sequence":
        batch = prp_batch(advantage, level="sequence", correction="none", denominator="peer")
        got = peer_weight(gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT])), advantage)
        geometric = np.prod(W) ** 0.25  # 3.1623
        np.testing.assert_allclose(got, np.full(4, 0.0 if advantage > 0 else geometric), rtol=1e-5, atol=1e-6)


# -- HACPO: Eq. 50 at every update, the KL on own rows ------------------------------------------------------------
def hacpo_batch(adapter: HACPOAdapter, log_s0: float, advantage: float, omega: float) -> dict:
    """One own row and one peer row whose sequence ratio to the peer's trace is ``exp(log_s0)`` at the snapshot."""
    batch = base_batch([0.5, advantage])
    snapshot = torch.tensor(np.stack([OWN, SNAPSHOT]), dtype=torch.float32)  # [2, 4]
    batch["old_per_token_logps"] = snapshot
    batch["ref_per_token_logps"] = snapshot - 0.3
    batch[PEER_LOGPS] = torch.cat([snapshot[:1], snapshot[1:] - log_s0])  # [2, 4]
    batch[COEFFICIENT] = torch.tensor([1.0, omega])
    batch[SOURCE_TOKENS] = torch.tensor([4.0, 4.0])  # the source's own tokens: the learner's (one tokenizer)
    batch[PEER_ROW] = torch.tensor([False, True])
    batch["tool_mask"] = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])
    return batch


@pytest.fixture
def hacpo(trainer, monkeypatch):
    config = load_run_config("tiny", regime="hacpo", check_grpo=False).config
    adapter = HACPOAdapter(config, "tiny-bpe", exchange=None)
    adapter.bind(trainer)
    monkeypatch.setattr(trainer, "regime", adapter)
    monkeypatch.setattr(trainer, "importance_sampling_level", "sequence")
    monkeypatch.setattr(trainer.state, "global_step", 0)
    return adapter


@pytest.mark.parametrize("update, moved, expected", [
    (0, 0.0, 1.5 * 0.9 ** 2),  # s = 0.9 in [0.8, 1]: omega s^2 = 1.215
    (0, math.log(0.95 / 0.9), 1.5 * 0.95 ** 2),  # the learner moved: s = 0.95 now, 1.35375 (Eq. 50 on the current s)
    (5, 0.0, 0.0),  # sixth update: band [0.925, 1], s = 0.9 outside: 0
    (5, math.log(0.95 / 0.9), 1.5 * 0.95 ** 2),  # ... s = 0.95 inside
    (0, math.log(1.05 / 0.9), 0.0),  # s = 1.05 > 1: 0
])
@pytest.mark.parametrize("advantage", [1.0, -2.0])
def test_hacpo_peer_row_gradient_is_eq_50_on_the_current_ratio(trainer, hacpo, monkeypatch, update, moved, expected,
                                                                advantage):
    """alpha = 1, omega = 1.5, s = 0.9 at the snapshot; the learner's log-probs moved by ``moved`` per token (so the
    current s is 0.9·exp(moved)). Eq. 50's gradient weight on every token: omega · s^2 inside [lower_u, 1], else 0,
    either advantage sign. The own row keeps TRL's term only (its own GSPO ratio)."""
    monkeypatch.setattr(trainer.state, "global_step", update)
    batch = hacpo_batch(hacpo, math.log(0.9), advantage, 1.5)
    grad = gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT + moved]))
    np.testing.assert_allclose(peer_weight(grad, advantage), np.full(4, expected), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("setting, value, s_now, expected", [
    ("alpha", 0.0, 0.9, 1.5 * 0.9),  # Eq. 12 off: plain sequence-level IS, omega s
    ("alpha", 2.0, 0.9, 1.5 * 0.9 ** 3),  # omega s^3
    ("cross_clip", False, 1.05, 1.5 * 1.05 ** 2),  # no band: s above 1 is kept
    ("discrepancy_coefficient", True, 0.9, 1.5 * 0.9 ** 2),  # the batch's omega (the adapter writes 1 when off)
])
def test_hacpo_mechanisms_in_the_gradient(trainer, hacpo, monkeypatch, setting, value, s_now, expected):
    monkeypatch.setattr(hacpo.settings, setting, value)
    batch = hacpo_batch(hacpo, math.log(0.9), 1.0, 1.5)
    grad = gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT + math.log(s_now / 0.9)]))
    np.testing.assert_allclose(peer_weight(grad, 1.0), np.full(4, expected), rtol=1e-5)


def test_hacpo_kl_acts_on_own_rows_only_unless_asked(trainer, hacpo, monkeypatch):
    """beta = 0.5, the reference 0.3 below the snapshot: the peer row's gradient is Eq. 50's alone (as beta = 0),
    the own row's changes by the KL's; with kl_on_peer_rows the peer row gets the KL's gradient too:
    d/dlogp of beta·(exp(δ) − δ − 1), δ = ref − logp = −0.3: beta·(1 − exp(−0.3)) = 0.12959 per token, over B·L."""
    logps = np.stack([OWN, SNAPSHOT])
    plain = gradient(trainer, monkeypatch, hacpo_batch(hacpo, math.log(0.9), 1.0, 1.5), logps)
    monkeypatch.setattr(trainer, "beta", 0.5)
    with_kl = gradient(trainer, monkeypatch, hacpo_batch(hacpo, math.log(0.9), 1.0, 1.5), logps)
    np.testing.assert_allclose(with_kl[1], plain[1], rtol=1e-6)
    assert np.abs(with_kl[0] - plain[0]).max() > 1e-3
    monkeypatch.setattr(hacpo.settings, "kl_on_peer_rows", True)
    peer_kl = gradient(trainer, monkeypatch, hacpo_batch(hacpo, math.log(0.9), 1.0, 1.5), logps)
    np.testing.assert_allclose(peer_kl[1] - plain[1], np.full(4, 0.5 * (1 - math.exp(-0.3)) / 8), rtol=1e-5)


# -- HACPO's normaliser: a row weighs what it weighs in the learner's standalone batch -----------------------------
OWN_MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # two own rows of 4 and 2 tokens
OWN_ADVANTAGES = [1.0, -0.5]
MOVED = 0.01  # the learner's log-probs moved since its snapshot: TRL's ratio (and its KL's factor) is not 1


def own_and_far_peers(peers: int) -> tuple[dict, np.ndarray]:
    """The two own rows and ``peers`` peer rows of 4 tokens whose ratio to their source is s = e^-3 per token, below
    every band (Eq. 50's weight 0): TRL's batch as HACPO's adapter writes it, and the log-probs of its forward."""
    rows = 2 + peers
    batch = base_batch(OWN_ADVANTAGES + [1.0, -1.0, 2.0, 0.5][:peers])
    batch["completion_mask"] = torch.cat([OWN_MASK, torch.ones(peers, 4, dtype=torch.long)])  # [B+N, 4]
    snapshot = torch.tensor(np.tile(SNAPSHOT, (rows, 1)) - 0.1 * np.arange(rows)[:, None], dtype=torch.float32)
    batch["num_items_in_batch"] = batch["completion_mask"].sum()  # count_items: every row's tokens
    batch["old_per_token_logps"] = snapshot
    batch["ref_per_token_logps"] = snapshot - 0.3
    batch[PEER_LOGPS] = torch.cat([snapshot[:2], snapshot[2:] + 3.0])  # log s = -3
    batch[COEFFICIENT] = torch.ones(rows)
    batch[SOURCE_TOKENS] = batch["completion_mask"].sum(dim=1).float()  # [B+N] one tokenizer: the rows' own
    batch[PEER_ROW] = torch.tensor([False, False] + [True] * peers)
    batch["tool_mask"] = torch.cat([torch.ones(2, 4, dtype=torch.long), torch.zeros(peers, 4, dtype=torch.long)])
    return batch, snapshot.double().numpy() + MOVED


def standalone_gradient(trainer, monkeypatch, logps: np.ndarray) -> np.ndarray:
    """The same two own rows in a standalone batch (TRL's loss alone)."""
    batch = base_batch(OWN_ADVANTAGES)
    batch["completion_mask"] = OWN_MASK.clone()
    batch["num_items_in_batch"] = OWN_MASK.sum()
    snapshot = torch.tensor(logps - MOVED, dtype=torch.float32)
    batch["old_per_token_logps"], batch["ref_per_token_logps"] = snapshot, snapshot - 0.3
    monkeypatch.setattr(trainer, "regime", WeightsFromBatch(load_run_config("tiny", regime="standalone",
                                                                             check_grpo=False).config, "tiny-bpe",
                                                            exchange=None))
    return gradient(trainer, monkeypatch, batch, logps)


@pytest.mark.parametrize("beta", [0.0, 0.1])
@pytest.mark.parametrize("loss_type, counted_share", [
    ("grpo", 2 / 4),  # TRL's mean over the micro-batch's 4 rows, 2 of them own
    ("dr_grpo", 2 / 4),  # its rows times max_completion_length
    ("dapo", 6 / 14),  # num_items_in_batch: 6 own tokens of 14
])
def test_hacpo_own_rows_train_as_standalone_when_no_peer_row_moves(trainer, hacpo, monkeypatch, loss_type,
                                                                    counted_share, beta):
    """Two own rows beside two peer rows outside the band, through TRL's loss and the trainer's compute_loss, the
    learner moved 0.01 per token since its snapshot, GSPO's ratio with TRL's bias-corrected KL (beta 0.1): the own
    rows' gradient is standalone GRPO's on the same rows and advantages, to float rounding; the peer rows get none.
    Without the normaliser (the rows' places counted, as TRL reduces a pooled batch) it was that gradient times the
    own rows' share of the count, 2/4 (6/14 of the tokens under dapo): half the step on a pool of two."""
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "beta", beta)
    monkeypatch.setattr(trainer.args, "use_bias_correction_kl", True)
    batch, logps = own_and_far_peers(2)
    assert hacpo.standalone_normaliser(batch, 2) == (1.0 if loss_type == "dapo" else 2.0)
    counted = gradient(trainer, monkeypatch, own_and_far_peers(2)[0], logps)  # row_scale 1: the count alone
    monkeypatch.setattr(hacpo, "row_scale", hacpo.standalone_normaliser(batch, 2))
    pooled = gradient(trainer, monkeypatch, batch, logps)
    alone = standalone_gradient(trainer, monkeypatch, logps[:2])
    mask = OWN_MASK.bool().numpy()
    np.testing.assert_allclose(pooled[:2][mask], alone[mask], rtol=1e-6)
    np.testing.assert_allclose(counted[:2][mask], counted_share * alone[mask], rtol=1e-6)
    assert not pooled[2:].any() and not counted[2:].any() and not pooled[:2][~mask].any()


def test_hacpo_own_and_peer_rows_gradient_by_hand_under_the_standalone_normaliser(trainer, hacpo, monkeypatch):
    """loss_type grpo, beta 0, at the snapshot (TRL's ratio 1): an own row of L tokens and advantage A gets
    d loss / d logp_t = -A / (B_own · L), B_own = 2 own rows (not the 4 rows of the batch): -1/8 on row 0's tokens,
    +0.5/4 on row 1's two. A peer row inside the band, s = 0.9, ω = 1.5, A = 2, of 4 tokens beside one own row:
    -(1/1)(1/4) ω s² A = -0.6075 per token (Eq. 50's weight 1.215 over the one own row's place, not 2)."""
    batch, logps = own_and_far_peers(2)
    monkeypatch.setattr(hacpo, "row_scale", hacpo.standalone_normaliser(batch, 2))
    grad = gradient(trainer, monkeypatch, batch, logps - MOVED)
    np.testing.assert_allclose(grad[:2], [[-1 / 8] * 4, [0.5 / 4, 0.5 / 4, 0.0, 0.0]], rtol=1e-6)
    inside = hacpo_batch(hacpo, math.log(0.9), 2.0, 1.5)
    monkeypatch.setattr(hacpo, "row_scale", hacpo.standalone_normaliser(inside, 1))
    grad = gradient(trainer, monkeypatch, inside, np.stack([OWN, SNAPSHOT]))
    np.testing.assert_allclose(grad[1], np.full(4, -1.5 * 0.81 * 2 / 4), rtol=1e-5)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "sapo"])
def test_aggregate_loss_reduces_as_trls_own_loss(trainer, monkeypatch, loss_type):
    """A regime's own term is reduced as TRL reduces its loss: with advantage -1 and the ratio 1, TRL's per-token
    loss is 1 on every token (sapo's 4/τ·σ(0)·1 = 2/τ_neg), so TRL's loss equals ``aggregate_loss`` of that tensor,
    with ragged masks and two accumulation steps."""
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "current_gradient_accumulation_steps", 2)
    batch = base_batch([-1.0, -1.0])
    batch["completion_mask"] = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    batch["num_items_in_batch"] = torch.tensor(9)
    logps = np.stack([OWN, SNAPSHOT])
    batch["old_per_token_logps"] = torch.tensor(logps, dtype=torch.float32)
    leaf = torch.tensor(logps, dtype=torch.float32)

    def forward(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        return leaf, torch.zeros_like(leaf), None

    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", forward)
    trl_loss = trainer.compute_loss(trainer.model, batch)
    per_token = 2.0 / trainer.args.sapo_temperature_neg if loss_type == "sapo" else 1.0
    ours = trainer.aggregate_loss(torch.full((2, 4), per_token), batch["completion_mask"], batch)
    assert ours.item() == pytest.approx(trl_loss.item(), rel=1e-6)


# -- PRP's used_share under TRL's clip: the rows autograd moves at the snapshot -----------------------------------
CLIP_ROWS = np.array([[0.5, 2.0, 5.0, 20.0], [2.0, 5.0, 20.0, 1.5], [0.5, 0.7, 0.6, 0.1], [0.5, 0.7, 0.6, 0.1],
                      [5.0, 20.0, 5.0, 20.0], [1.0, 1.0, 1.0, 1.0]])  # w of six peer rows
CLIP_ADVANTAGES = [1.0, 1.0, -1.0, 1.0, -1.0, 0.0]


@pytest.mark.parametrize("level, delta, used", [
    ("token", None, [1, 0, 0, 1, 1, 0]),  # A > 0: some w <= 1.2; A < 0: some w >= 0.8; A = 0 moves nothing
    ("sequence", None, [0, 0, 0, 1, 1, 0]),  # GSPO: W̄ = 3.162, 4.162, 0.381, 0.381, 10: the same rule on W̄
    ("token", 3.0, [1, 0, 0, 1, 0, 0]),  # delta 3: an A < 0 row moves only where some w is in [0.8, 3]
])
def test_prp_used_share_without_a_correction_is_the_rows_trls_clip_lets_move(trainer, monkeypatch, level, delta,
                                                                              used):
    """The paper's corrected PRP (no correction, the peer denominator): TRL's ratio on a peer row at the snapshot is
    ``w``, and ``-min(w A, clip(w) A)`` passes a gradient only where the unclipped term is the minimum. Six peer rows
    (w above, A = [1, 1, -1, 1, -1, 0]): ``source_diagnostics``' ``used`` with the adapter's clip equals the rows
    whose log-probs get a nonzero gradient by autograd through TRL's loss (before, it said 5 of 6 in every case)."""
    from mutualrl.regimes.prp.maths import source_diagnostics

    monkeypatch.setattr(trainer, "importance_sampling_level", level)
    monkeypatch.setattr(trainer.args, "delta", delta)
    config = load_run_config("tiny", regime="prp", check_grpo=False).config
    adapter = PRPAdapter(config, "tiny-bpe", exchange=None)
    adapter.bind(trainer)
    clip = adapter.ppo_clip()
    assert (clip.level, clip.epsilon_low, clip.epsilon_high, clip.delta) == (level, EPS, EPS, delta)
    log_w = torch.tensor(np.log(CLIP_ROWS), dtype=torch.float32)  # [6, 4]
    snapshot = np.concatenate([OWN[None], np.tile(SNAPSHOT, (6, 1))])  # [7, 4]
    batch = base_batch([0.0, *CLIP_ADVANTAGES])
    batch["old_per_token_logps"] = torch.tensor(snapshot, dtype=torch.float32) - torch.cat(
        [torch.zeros(1, 4), log_w])  # [7, 4] the own row's snapshot, the peers' traces
    grad = gradient(trainer, monkeypatch, batch, snapshot)
    moved = (grad[1:] != 0).any(axis=1).astype(int).tolist()
    rows = source_diagnostics(log_w, torch.ones(6, 4, dtype=torch.long), "none", "token", 2.0, 10.0,
                              torch.ones(6, dtype=torch.bool), torch.tensor(CLIP_ADVANTAGES), clip)
    assert moved == used and rows["used"].long().tolist() == used
    assert source_diagnostics(log_w, torch.ones(6, 4, dtype=torch.long), "none", "token", 2.0, 10.0,
                              torch.ones(6, dtype=torch.bool), torch.tensor(CLIP_ADVANTAGES))["used"].sum() == 5


def test_prp_the_clip_is_modelled_only_where_the_ratio_is_w(trainer, monkeypatch):
    """A correction (the ratio divides by the snapshot: 1), the learner denominator (1 as well) or a loss without a
    hard clip (cispo, sapo) leave every row's gradient to ``T(w)·A``: no clip."""
    config = load_run_config("tiny", regime="prp", check_grpo=False).config
    for settings in ({"correction": "tis"}, {"denominator": "learner"}):
        config.regime.prp = replace(load_run_config("tiny", regime="prp", check_grpo=False).config.regime.prp,
                                    **settings)
        adapter = PRPAdapter(config, "tiny-bpe", exchange=None)
        adapter.bind(trainer)
        assert adapter.ppo_clip() is None
    config.regime.prp = load_run_config("tiny", regime="prp", check_grpo=False).config.regime.prp
    adapter = PRPAdapter(config, "tiny-bpe", exchange=None)
    adapter.bind(trainer)
    for loss_type, clipped in (("cispo", False), ("sapo", False), ("dapo", True)):
        monkeypatch.setattr(trainer, "loss_type", loss_type)
        assert (adapter.ppo_clip() is not None) == clipped


@pytest.mark.parametrize("correction, mean_weight", [("tis", 2.125), ("tis-drop", 1.375)])
def test_a_token_level_correction_under_gspo_trains_the_rows_mean_weight(trainer, monkeypatch, correction,
                                                                         mean_weight):
    """Why the configuration refuses a per-token correction under GSPO: TRL's sequence ratio averages the log-ratios,
    so the token weights T(w) = [0.5, 2, 3, 3] (tis, C = 3) reach every token as their mean, 2.125, and tis-drop's
    [0.5, 2, 3, 0] (w = 20 > D dropped) as 1.375: the dropped token trains with weight 1.375, not 0."""
    from mutualrl.config.typed import ConfigError

    monkeypatch.setattr(trainer, "importance_sampling_level", "sequence")
    batch = prp_batch(1.0, correction=correction)
    got = peer_weight(gradient(trainer, monkeypatch, batch, np.stack([OWN, SNAPSHOT])), 1.0)
    np.testing.assert_allclose(got, np.full(4, mean_weight), rtol=1e-5)
    with pytest.raises(ConfigError, match=r"grpo\.importance_sampling_level: 'sequence' \(GSPO\) with regime\.prp\."
                                          rf"correction '{correction}' at correction_level 'token'") as err:
        load_run_config("tiny", regime="prp", overrides=[f"regime.prp.correction={correction}",
                                                         "grpo.importance_sampling_level=sequence"])
    assert "\n" not in str(err.value)
