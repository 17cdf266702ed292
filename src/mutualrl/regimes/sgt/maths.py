"""Success-Gated Transfer (paper Sec. "Regime 3", Eq. regime3_total; App. "Implementation details for SGT").

    L^(n)(θ) = L_GRPO^(n)(θ) + λ · I_trigger · L_SGT^(n)(θ),   L_SGT^(n) = -log π^(n)_θ(y* | x)

The steps, in the order the trainer adapter runs them:

1. :func:`sgt_gate` — which prompts fire: the learner failed and some peer succeeded; under a rescue budget
   (not in the paper) :func:`within_rescue_budget` keeps those not rescued on its number of earlier steps.
2. :func:`select_peer_successes` — one peer success ``y*`` per gated prompt.
3. :func:`assign_sgt_rows` — which learner rows carry it (a per-prompt cap).
4. :func:`sgt_example_weights` — the weight of each row so that the summed term is
   ``λ_SGT · mean over gated examples`` of the token-averaged NLL, scaled for gradient
   accumulation exactly like TRL's GRPO loss.
5. :func:`sgt_nll` — the weighted token-averaged NLL of the peer responses, added to TRL's loss.
6. :func:`sgt_metrics` — gate rate, activation profile (App. "Per-prompt activation profile")
   and compute overhead (App. "Compute overhead under a fixed rollout budget").

When no prompt is gated every step yields nothing (all-False masks, -1 choices, zero weights,
an exact zero loss): "if a batch contains no high-reward examples, the update is pure GRPO".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from mutualrl.regimes.api import Share, Total, check_float, check_learner_and_peers, check_same_shape, every_scored
from mutualrl.regimes.sgt.spec import SGTSettings, check_sgt_settings


@dataclass
class SGTGate:
    """Result of :func:`sgt_gate` for one learner.

    Attributes:
        gated: ``[P]`` bool, the trigger ``I_trigger`` of Eq. regime3_total per prompt.
        peer_success: ``[P, M-1, K]`` bool, verified peer successes ``r > success_threshold``
            (the candidates ``S_x^(-n)``); NaN is never a success.
        learner_failed: ``[P]`` bool, the learner side of the gate.
        peer_has_success: ``[P]`` bool, the peer side of the gate.
    """

    gated: torch.Tensor
    peer_success: torch.Tensor
    learner_failed: torch.Tensor
    peer_has_success: torch.Tensor


def _check_thresholds(success_threshold: float, failure_threshold: float) -> None:
    """The settings' own rule (``spec.check_sgt_settings``), for thresholds given outside a recipe."""
    problem = check_sgt_settings(SGTSettings(success_threshold=success_threshold, failure_threshold=failure_threshold))
    if problem is not None:
        name, why = problem
        raise ValueError(f"SGT {name} ({failure_threshold}) {why}: a reward would be both a success and a negative")


def threshold_problem(rewards: torch.Tensor, success_threshold: float, failure_threshold: float) -> str | None:
    """Why the gate cannot work on these rewards (the first step's, every policy's), or None.

    The thresholds compare the combined reward (``task.reward_funcs`` weighted by ``grpo.reward_weights``,
    docs/regimes.md). Rewards that never exceed ``success_threshold`` leave no success to transfer; rewards that
    are never below ``failure_threshold`` leave no failed group to rescue. One step is a small sample (a hard
    task may show no success yet), so this is a warning, not an error.
    """
    seen = rewards[~torch.isnan(rewards)]
    if seen.numel() == 0:
        return None
    low, high = float(seen.min()), float(seen.max())
    if high <= success_threshold and (low, high) != (0.0, 0.0):  # all zero: nothing solved yet, as usual early
        return (f"no reward exceeded success_threshold={success_threshold} (rewards seen: {low:g} to {high:g}); "
                "set regime.sgt.success_threshold inside your rewards' range")
    if low >= failure_threshold:
        return (f"no reward is below failure_threshold={failure_threshold} (rewards seen: {low:g} to {high:g}), so no "
                "group counts as failed; set regime.sgt.failure_threshold inside your rewards' range")
    return None


def is_success(rewards: torch.Tensor, success_threshold: float = 0.8) -> torch.Tensor:
    """Verified success: ``r > success_threshold`` (App. SGT: "responses with rewards above 0.8"); NaN → False."""
    return rewards > success_threshold


def is_negative(rewards: torch.Tensor, failure_threshold: float = 0.2) -> torch.Tensor:
    """Negative: ``r < failure_threshold`` (App. SGT: "responses below 0.2 are negatives"); NaN → False."""
    return rewards < failure_threshold


def sgt_gate(
    learner_rewards: torch.Tensor,
    peer_rewards: torch.Tensor,
    success_threshold: float = 0.8,
    failure_threshold: float = 0.2,
    require_all_failed: bool = True,
) -> SGTGate:
    """The SGT trigger per prompt (Sec. "Regime 3" (1) Gate; App. SGT "Gating on failure and peer success").

    For prompt ``x`` with learner rewards ``r_{n,1..K}`` and peer rewards ``r_{m,j}``, ``m ≠ n``:

        learner_failed(x) = [∀i scorable: r_{n,i} < τ_fail] ∧ [∃i: r_{n,i} < τ_fail]    (strict: paper)
        learner_failed(x) = ∃i: r_{n,i} < τ_fail                                          (non-strict)
        peer_has_success(x) = ∃ m≠n, j: r_{m,j} > τ_succ
        gated(x) = learner_failed(x) ∧ peer_has_success(x)

    Unscorable (NaN) learner rollouts are neither successes nor negatives: the strict gate asks
    that every *scored* rollout be negative and that there be at least one, so a prompt whose
    learner rollouts are all unscorable never fires (there is no evidence of failure). Rewards
    between the thresholds are neither: under the strict gate one such rollout blocks it. In
    strict mode a learner with any success is never gated, matching the theory gate
    ``Y_n(x) ∩ S_x = ∅`` whenever ``τ_fail ≤ τ_succ``.

    Args:
        learner_rewards: ``[P, K]`` learner rewards.
        peer_rewards: ``[P, M-1, K]`` rewards of the peers on the same prompts.
        success_threshold: ``τ_succ`` (``regime.sgt.success_threshold``, paper 0.8).
        failure_threshold: ``τ_fail`` (``regime.sgt.failure_threshold``, paper 0.2).
        require_all_failed: strict gate (``regime.sgt.require_all_failed``, paper: True).
    """
    check_learner_and_peers(learner_rewards, peer_rewards)
    _check_thresholds(success_threshold, failure_threshold)
    negative = is_negative(learner_rewards, failure_threshold)
    any_negative = negative.any(dim=1)
    learner_failed = every_scored(negative, learner_rewards) if require_all_failed else any_negative  # [P]
    peer_success = is_success(peer_rewards, success_threshold)
    peer_has_success = peer_success.flatten(1).any(dim=1)
    return SGTGate(
        gated=learner_failed & peer_has_success,
        peer_success=peer_success,
        learner_failed=learner_failed,
        peer_has_success=peer_has_success,
    )


def within_rescue_budget(gate: SGTGate, rescued_before: torch.Tensor, max_rescues: int | None) -> SGTGate:
    """The gate of prompts that have not used up their rescues (``regime.sgt.max_rescues_per_prompt``; not in the
    paper, whose gate has no memory):

        gated'(x) = gated(x) ∧ [c is unset ∨ rescued_before(x) < c]

    Args:
        gate: from :func:`sgt_gate`.
        rescued_before: ``[P]`` int, the steps that rescued each prompt for this learner before this one.
        max_rescues: the cap ``c``; None: the gate unchanged.
    """
    check_same_shape("rescued_before", rescued_before, "gated", gate.gated)
    if max_rescues is None:
        return gate
    if max_rescues < 1:
        raise ValueError(f"max_rescues_per_prompt must be >= 1 or unset; got {max_rescues}")
    under = rescued_before < max_rescues  # [P]
    return SGTGate(gated=gate.gated & under, peer_success=gate.peer_success, learner_failed=gate.learner_failed,
                   peer_has_success=gate.peer_has_success)


def select_peer_successes(
    gate: SGTGate,
    peer_lengths: torch.Tensor,
    selection: Literal["random", "shortest"] = "random",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one peer success ``y*`` per gated prompt (Sec. "Regime 3" (2) Transfer).

    - ``"random"``: ``y* ~ Uniform(S_x^(-n))``, uniform over *all* peer successes of the prompt
      (every success equally likely, not every peer). One uniform draw ``u_x`` per prompt (P draws
      per call, gated or not, so the generator advances the same way every step); the chosen
      candidate is the ``⌊u_x · |S_x^(-n)|⌋``-th in peer-major order.
    - ``"shortest"``: the success with the fewest tokens (App. SGT: "the configured
      shorter-response heuristic"); ties go to the lowest peer slot, then the lowest sample index.

    Args:
        gate: from :func:`sgt_gate`.
        peer_lengths: ``[P, M-1, K]`` response lengths in tokens (any numeric dtype).
        selection: ``regime.sgt.selection``.
        generator: required for ``"random"``.

    Returns:
        ``[P, 2]`` int64 ``(peer slot, sample index)``; ``(-1, -1)`` where the prompt is not gated.
        The peer slot indexes dim 1 of the peer tensors (see ``pool.split_pool``).
    """
    cand = gate.peer_success
    if not isinstance(peer_lengths, torch.Tensor) or peer_lengths.shape != cand.shape:
        got = tuple(peer_lengths.shape) if isinstance(peer_lengths, torch.Tensor) else type(peer_lengths).__name__
        raise ValueError(f"peer_lengths must have the peer shape [P, M-1, K] = {tuple(cand.shape)}; got {got}")
    p, peers, k = cand.shape
    if selection not in ("random", "shortest"):
        raise ValueError(f"SGT selection must be 'random' or 'shortest'; got {selection!r}")
    if selection == "random" and generator is None:
        raise ValueError("SGT selection 'random' needs a torch.Generator (no hidden global RNG state)")
    if peers * k == 0:  # no peers (M = 1): nothing can be gated
        return torch.full((p, 2), -1, dtype=torch.long, device=cand.device)
    flat = cand.reshape(p, peers * k) & gate.gated.unsqueeze(1)
    count = flat.sum(dim=1)
    if selection == "random":
        u = torch.rand(p, generator=generator, device=generator.device, dtype=torch.float64).to(cand.device)
        rank = torch.minimum((u * count).floor().long(), (count - 1).clamp(min=0))
        # The (rank+1)-th True in row order: first position where the running count reaches rank+1.
        hit = flat & (flat.long().cumsum(dim=1) == (rank + 1).unsqueeze(1))
        pos = hit.long().argmax(dim=1)
    else:  # "shortest"
        lengths = peer_lengths.reshape(p, peers * k).to(torch.float64)
        keyed = torch.where(flat, lengths, torch.full_like(lengths, float("inf")))
        pos = keyed.argmin(dim=1)
    chosen = torch.stack([pos // k, pos % k], dim=1).long()
    return torch.where((count > 0).unsqueeze(1), chosen, torch.full_like(chosen, -1))


def assign_sgt_rows(gated: torch.Tensor, k: int, max_pairs_per_prompt: int = 1) -> torch.Tensor:
    """Which learner rows carry the transferred success (App. SGT "Packaging positive examples").

    "A per-prompt counter caps how many SGT pairs can be formed for the same prompt": on a gated
    prompt the first ``min(max_pairs_per_prompt, K)`` learner rows get the SGT mask (each pairs a
    learner negative ``y^-`` with the prompt's selected ``y*``); all rows of other prompts are off.

        row_mask[x, i] = gated(x) ∧ i < min(c, K)

    Args:
        gated: ``[P]`` bool from :func:`sgt_gate`.
        k: rollouts per prompt K.
        max_pairs_per_prompt: the cap ``c`` (``regime.sgt.max_pairs_per_prompt``, paper: 1).

    Returns:
        ``[P, K]`` bool; flatten with ``.reshape(-1)`` to TRL's row order (prompt-major).
    """
    if not isinstance(gated, torch.Tensor) or gated.dim() != 1 or gated.dtype != torch.bool:
        raise ValueError(f"gated must be a [P] bool tensor; got {getattr(gated, 'shape', type(gated).__name__)}")
    if k < 1:
        raise ValueError(f"K (rollouts per prompt) must be >= 1; got {k}")
    if max_pairs_per_prompt < 0:
        raise ValueError(f"max_pairs_per_prompt must be >= 0; got {max_pairs_per_prompt}")
    first = torch.arange(k, device=gated.device) < min(max_pairs_per_prompt, k)
    return gated.unsqueeze(1) & first.unsqueeze(0)


def sgt_example_weights(
    row_mask_flat: torch.Tensor,
    lam: float,
    steps_per_generation: int,
    gradient_accumulation_steps: int,
    num_gated: int | None = None,
    num_processes: int = 1,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Per-row weights ``w_i`` for :func:`sgt_nll` (App. SGT "Loss computation and combination with GRPO").

    Target, per optimizer step: ``λ_SGT · L_SGT`` with ``L_SGT = mean over gated examples of the
    token-averaged NLL`` ("averaged per token and aggregated over all gated examples").

    How TRL applies a loss: the local generation batch (here ``row_mask_flat``, ``B`` rows) is
    shuffled and cut into ``S = steps_per_generation`` micro-batches; an optimizer step
    accumulates ``G = gradient_accumulation_steps`` of them, and TRL divides each micro-batch's
    GRPO loss by ``G`` (loss types grpo/bnpo/dr_grpo/sapo/luspo) or normalises by the tokens of
    one accumulation window, ``num_items_in_batch / num_processes · G / S`` (dapo/cispo/vespo).
    DDP then averages gradients over the ``num_processes`` ranks.

    We follow the dapo rule for SGT: normalise by the number of gated rows in one accumulation
    window, ``N · G / S`` (``N`` = gated rows of the whole generation batch on all ranks,
    ``num_gated``), times ``num_processes`` to undo DDP's averaging:

        w_i = λ · S · num_processes / (G · N)   on gated rows,   0 elsewhere   (0 everywhere if N = 0)

    Summing ``w_i · NLL_i`` over all micro-batches and ranks of one generation batch gives
    ``λ · (S/G) · mean_gated NLL`` spread over its ``S/G`` optimizer steps, i.e. ``λ · mean`` per step
    on average (exactly, when ``S = G`` and ``num_processes = 1``: ``w_i = λ / N``). The caller adds
    :func:`sgt_nll` to TRL's loss *as is*: the accumulation factor is already inside ``w_i``. With
    ``num_iterations > 1`` the same rows are reused in each iteration, each pass again giving
    ``λ · mean`` per step. At the end of an epoch TRL may accumulate fewer micro-batches
    (``current_gradient_accumulation_steps``); pass that value for ``G`` to match TRL there too.

    Args:
        row_mask_flat: ``[B]`` bool SGT mask of the local generation batch, TRL row order.
        lam: ``λ_SGT`` (``regime.sgt.lam``, paper 0.1).
        steps_per_generation: TRL's ``args.steps_per_generation`` (S).
        gradient_accumulation_steps: TRL's (current) gradient accumulation steps (G).
        num_gated: gated rows over all ranks (gather it); default ``row_mask_flat.sum()`` (one rank).
        num_processes: ranks of this policy (DDP world size).
        dtype: dtype of the returned weights.

    Returns:
        ``[B]`` weights.
    """
    if not isinstance(row_mask_flat, torch.Tensor) or row_mask_flat.dim() != 1 or row_mask_flat.dtype != torch.bool:
        raise ValueError(
            "row_mask_flat must be a [B] bool tensor; got "
            f"{getattr(row_mask_flat, 'shape', type(row_mask_flat).__name__)}"
        )
    if steps_per_generation < 1 or gradient_accumulation_steps < 1 or num_processes < 1:
        raise ValueError(
            "steps_per_generation, gradient_accumulation_steps and num_processes must be >= 1; got "
            f"{steps_per_generation}, {gradient_accumulation_steps}, {num_processes}"
        )
    if not lam >= 0:
        raise ValueError(f"SGT lam must be >= 0; got {lam}")
    local = int(row_mask_flat.sum())
    n = local if num_gated is None else int(num_gated)
    if n < local:
        raise ValueError(f"num_gated ({n}) is smaller than this rank's own gated rows ({local})")
    if n == 0:
        return torch.zeros(row_mask_flat.shape, dtype=dtype, device=row_mask_flat.device)
    w = lam * steps_per_generation * num_processes / (gradient_accumulation_steps * n)
    return torch.where(
        row_mask_flat,
        torch.full(row_mask_flat.shape, w, dtype=dtype, device=row_mask_flat.device),
        torch.zeros(row_mask_flat.shape, dtype=dtype, device=row_mask_flat.device),
    )


def sgt_nll(per_token_logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted token-averaged NLL of the transferred peer successes (App. SGT "Loss computation").

        L = Σ_i w_i · ( -Σ_t ℓ_{i,t} · mask_{i,t} / max(1, Σ_t mask_{i,t}) )

    with ``ℓ_{i,t} = log π^(n)_θ(y*_{i,t} | x, y*_{i,<t})`` the learner's log-probs of the
    re-encoded peer response (the ``max(1, ·)`` is TRL's ``clamp(min=1.0)``). Rows with ``w_i = 0``
    and positions outside the mask contribute exactly 0 even if their log-probs are -inf or NaN,
    so an all-zero ``weights`` (nothing gated) gives an exact 0 that still carries a graph. See
    :func:`sgt_example_weights` for the weights that make this ``λ · mean over gated examples``.

    Args:
        per_token_logps: ``[B, T]`` learner log-probs on the auxiliary sequences (with grad).
        mask: ``[B, T]`` completion mask of the peer responses.
        weights: ``[B]`` per-example weights.

    Returns:
        scalar loss.
    """
    check_float("per_token_logps", per_token_logps, 2, "[B, T]")
    check_same_shape("mask", mask, "per_token_logps", per_token_logps)
    if not isinstance(weights, torch.Tensor) or weights.shape != per_token_logps.shape[:1]:
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ValueError(f"weights must have shape [B] = {tuple(per_token_logps.shape[:1])}; got {got}")
    m = mask.bool()
    logps = torch.where(m, per_token_logps, torch.zeros_like(per_token_logps))
    ntok = m.sum(dim=1).clamp(min=1).to(per_token_logps.dtype)
    nll = -logps.sum(dim=1) / ntok
    w = weights.to(per_token_logps.dtype)
    return torch.where(w != 0, w * nll, torch.zeros_like(nll)).sum()


def _rate(num: torch.Tensor, den: torch.Tensor) -> Share:
    return Share(float(num), float(den))


def sgt_metrics(
    gate: SGTGate,
    learner_rewards: torch.Tensor,
    peer_rewards: torch.Tensor,
    extra_tokens: int,
    rollout_tokens: int,
    m: int,
    k: int,
    success_threshold: float = 0.8,
    max_pairs_per_prompt: int = 1,
) -> dict[str, float]:
    """SGT diagnostics of App. "SGT diagnostics" for one learner and one step.

    Activation profile (App. "Per-prompt activation profile", Tab. sgt-selectivity):

    - ``gate_rate`` = gated prompts / P (``gated_prompts`` the count);
    - ``learner_success_rate_gated`` / ``_ungated``: the learner's successes ``r > τ_succ`` over its
      scored rollouts on gated / ungated prompts (0 on gated prompts under the strict gate);
    - ``pool_success_rate_gated`` / ``_ungated``: the same over all M policies' rollouts ("Succ./all");
    - ``all_fail_prompt_rate``: prompts on which no rollout of the pool succeeds / P.

    The rates are :class:`~mutualrl.regimes.core.rank_metrics.Share` and ``gated_prompts`` a ``Total``: over several
    ranks (each with its own prompts) they reduce to the whole batch's.

    Compute overhead (App. "Compute overhead under a fixed rollout budget", Tab. regime-cost):

    - ``extra_token_frac`` = extra_tokens / rollout_tokens (SGT teacher tokens vs the learner's
      rollout tokens this step);
    - ``extra_seq_frac`` = SGT pairs / (P·K), pairs = gated · min(c, K);
    - ``extra_seq_frac_bound`` = c·(M-1)/(M·K): the paper's analytic bound on the *pool-wide*
      extra sequence fraction (strict gate, c = 1): on each prompt at most M-1 of the M learners
      fire, since a learner whose rollout is the peer success is not failing. It bounds the mean of
      ``extra_seq_frac`` over the M learners, not one learner's value (which is at most c/K).

    Args:
        gate: this learner's :func:`sgt_gate` result.
        learner_rewards: ``[P, K]``; peer_rewards: ``[P, M-1, K]``.
        extra_tokens: tokens of the peer responses the learner scored for SGT this step.
        rollout_tokens: tokens of the learner's own rollouts this step.
        m: pool size M; k: rollouts per prompt K.
        success_threshold: ``τ_succ``.
        max_pairs_per_prompt: the cap c.
    """
    check_learner_and_peers(learner_rewards, peer_rewards)
    p = learner_rewards.shape[0]
    gated = gate.gated
    if gated.shape != (p,):
        raise ValueError(f"gate.gated must have shape [P] = ({p},); got {tuple(gated.shape)}")
    if m < 1 or k < 1:
        raise ValueError(f"M and K must be >= 1; got M={m}, K={k}")
    ls = is_success(learner_rewards, success_threshold)
    lscored = ~torch.isnan(learner_rewards)
    ps = is_success(peer_rewards, success_threshold).flatten(1)
    pscored = (~torch.isnan(peer_rewards)).flatten(1)
    pool_s = ls.sum(dim=1) + ps.sum(dim=1)
    pool_n = lscored.sum(dim=1) + pscored.sum(dim=1)
    learner_s = ls.sum(dim=1)
    learner_n = lscored.sum(dim=1)
    off = ~gated
    pairs = int(gated.sum()) * min(max_pairs_per_prompt, k)
    return {
        "gate_rate": _rate(gated.sum(), torch.tensor(p)),
        "gated_prompts": Total(gated.sum().item()),
        "learner_success_rate_gated": _rate(learner_s[gated].sum(), learner_n[gated].sum()),
        "learner_success_rate_ungated": _rate(learner_s[off].sum(), learner_n[off].sum()),
        "pool_success_rate_gated": _rate(pool_s[gated].sum(), pool_n[gated].sum()),
        "pool_success_rate_ungated": _rate(pool_s[off].sum(), pool_n[off].sum()),
        "all_fail_prompt_rate": _rate((pool_s == 0).sum(), torch.tensor(p)),
        "extra_token_frac": _rate(torch.tensor(extra_tokens), torch.tensor(rollout_tokens)),
        "extra_seq_frac": _rate(torch.tensor(pairs), torch.tensor(p * k)),
        "extra_seq_frac_bound": max_pairs_per_prompt * (m - 1) / (m * k),
    }


def rescue_logprob(per_token_logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor) -> Share:
    """Mean sequence log-probability ``log π^(n)_θ(y* | x) = Σ_t ℓ_{i,t}`` of the transferred successes.

    Averaged over the rows that carry the SGT term (``w_i > 0``), measured with the weights
    the step starts from: the learner's log-likelihood of the peer answer on the prompts it
    is being rescued on. Its change over a run shows whether ``λ · L_SGT`` (Eq.
    regime3_total) moves the learner at all. NaN when no row carries the term. A :class:`Share` (the sum over
    the rows and their count), so that over several ranks it is the mean over every rank's rows.
    """
    check_float("per_token_logps", per_token_logps, 2, "[B, T]")
    check_same_shape("mask", mask, "per_token_logps", per_token_logps)
    rows = weights > 0
    m = mask[rows].bool()
    logps = torch.where(m, per_token_logps[rows], torch.zeros_like(per_token_logps[rows]))  # [R, T]
    return Share(float(logps.sum(dim=1).double().sum()), int(rows.sum()))


def source_use(gate: SGTGate, chosen: torch.Tensor, peer_rewards: torch.Tensor,
               names: list[str]) -> dict[str, float]:
    """Per peer ``names[j]``: ``from/<peer>/used_share``, the share of its scored rollouts of these prompts that
    SGT trains on this step (a chosen success counts once, however many learner rows carry it). A ``Share``.

    Args:
        gate: this learner's :func:`sgt_gate`; chosen: ``[P, 2]`` from :func:`select_peer_successes`.
        peer_rewards: ``[P, M-1, K]`` (NaN = not scored); names: the peers in slot order.
    """
    slots = chosen[:, 0][gate.gated]  # [G] the chosen success's peer slot of each gated prompt
    scored = (~torch.isnan(peer_rewards)).sum(dim=(0, 2))  # [M-1]
    return {f"from/{name}/used_share": Share(float((slots == j).sum()), float(scored[j]))
            for j, name in enumerate(names)}
