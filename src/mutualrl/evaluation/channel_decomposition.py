"""Which sharing regime can act on which prompt (App. "Channel decomposition of the three sharing regimes").

The three regimes use different channels of the same experience: PRP the peer responses
themselves (through the importance ratio), XGRPO the peers' rewards (through the pooled
normalisation), SGT a verified peer success where the learner failed. This module decides, per
prompt and learner, which of them has something to act on, from rewards and (for PRP) ratios.
It defines usability and the cells of the joint table (:data:`USABILITY_CELLS`) once; the one caller,
:func:`mutualrl.evaluation.complementarity.usability_table`, labels those cells for Tab. regime-overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mutualrl.regimes.core.grpo import TRL_STD_EPS, group_advantages, prp_pooled_advantages
from mutualrl.regimes.core.reward_shapes import ScaleRewards, check_learner_and_peers, join_pool
from mutualrl.regimes.sgt.maths import sgt_gate


@dataclass
class Usability:
    """Per-prompt usability of the three regimes (App. "Channel decomposition of the three sharing regimes").

    Attributes:
        prp: ``[P]`` some peer response has its sequence ratio inside ``[1-ε, 1+ε]`` for the learner
            (False everywhere when no ratios were given).
        xgrpo: ``[P]`` pooled normalisation changes some learner advantage (by more than ``atol``).
        sgt: ``[P]`` the SGT gate fires (learner fails, a peer succeeds).
        table: fraction of prompts in each of the 8 cells, keyed ``"none"``, ``"prp_only"``,
            ``"xgrpo_only"``, ``"sgt_only"``, ``"prp+xgrpo"``, ``"prp+sgt"``, ``"xgrpo+sgt"``, ``"all"``
            (the paper's Tab. "Joint usability" uses the same cells; ``"X+Y"`` means exactly X and Y).
    """

    prp: torch.Tensor
    xgrpo: torch.Tensor
    sgt: torch.Tensor
    table: dict[str, float]


USABILITY_CELLS: tuple[tuple[str, bool, bool, bool], ...] = (
    ("none", False, False, False),
    ("xgrpo_only", False, True, False),
    ("xgrpo+sgt", False, True, True),
    ("sgt_only", False, False, True),
    ("prp_only", True, False, False),
    ("prp+xgrpo", True, True, False),
    ("prp+sgt", True, False, True),
    ("all", True, True, True),
)
"""(cell name, PRP usable, XGRPO usable, SGT usable) for every cell of the joint-usability table."""


def regime_usability(
    learner_rewards: torch.Tensor,
    peer_rewards: torch.Tensor,
    peer_seq_ratios: torch.Tensor | None,
    ratio_band: tuple[float, float] = (0.8, 1.2),
    scale_rewards: ScaleRewards = "group",
    std_eps: float = TRL_STD_EPS,
    success_threshold: float = 0.8,
    failure_threshold: float = 0.2,
    require_all_failed: bool = True,
    atol: float = 1e-6,
) -> Usability:
    """Which regimes can act on each prompt, and their joint table (App. "Channel decomposition").

    Paper definitions, per prompt ``x`` and learner ``n``:

    - PRP-usable: ``∃ m≠n, j: 1-ε ≤ W^(n)(x, y_{m,j}) ≤ 1+ε`` with ``W`` the sequence-level ratio of a
      peer response under the learner (``peer_seq_ratios``, NaN = not available);
    - XGRPO-usable: ``∃ i: |A^pool_{n,i} - A^loc_{n,i}| > atol`` with ``A^pool`` the learner's slice of
      :func:`~mutualrl.regimes.core.grpo.prp_pooled_advantages` (pooled normalisation) and ``A^loc`` its
      standalone GRPO advantage;
    - SGT-usable: the SGT gate fires (:func:`mutualrl.regimes.sgt.maths.sgt_gate` with the given thresholds).

    Which standard deviation: the **sample** one (Bessel's ``n-1``), in both advantages. XGRPO-usable
    asks whether sharing would change the advantages the learner trains on, and those are GRPO's
    (Eq. grpo) as TRL computes them, with TRL's sample ``nanstd`` (:mod:`mutualrl.regimes.core.grpo`
    reproduces it bit for bit). A population std would call some prompts unchanged that XGRPO does
    change: a learner ``[0, 1]`` in a pool ``[0, 1, 0, 1]`` has the pool's mean and population std, but
    its sample std (0.71) is not the pool's (0.58), so its advantages move. With one rollout per
    policy (eval results, K = 1) the two agree: the learner's own advantage is 0 either way.

    Called per (prompt, learner) by :func:`mutualrl.evaluation.complementarity.usability_table`, on eval
    results (K = 1) or on K > 1 reward groups a caller gathered (e.g. from a run's SEE records).

    Args:
        learner_rewards: ``[P, K]``.
        peer_rewards: ``[P, M-1, K]``.
        peer_seq_ratios: ``[P, ...]`` sequence ratios ``exp(L_θ - L_behavior)`` of peer responses, any number
            per prompt (a PRP run's ``[P, M-1, K]``); None: not available (PRP-usable is False everywhere).
        ratio_band: the usable ratio band ``[1-ε, 1+ε]``, bounds included (paper: ε = 0.2).
        scale_rewards, std_eps: normalisation of both advantages.
        success_threshold, failure_threshold, require_all_failed: SGT gate settings.
        atol: an advantage change larger than this counts as a change (float noise does not).
    """
    check_learner_and_peers(learner_rewards, peer_rewards)
    p = learner_rewards.shape[0]
    if peer_seq_ratios is None:
        prp = torch.zeros(p, dtype=torch.bool)
    else:
        if peer_seq_ratios.dim() < 1 or peer_seq_ratios.shape[0] != p:
            raise ValueError(f"peer_seq_ratios must have P={p} rows like learner_rewards [P, K]; "
                             f"got {tuple(peer_seq_ratios.shape)}")
        low, high = ratio_band
        prp = ((peer_seq_ratios >= low) & (peer_seq_ratios <= high)).reshape(p, -1).any(dim=1)
    pool = join_pool(learner_rewards, peer_rewards, 0)
    pooled = prp_pooled_advantages(pool, scale_rewards, std_eps)[:, 0]
    local = group_advantages(learner_rewards, scale_rewards, std_eps)
    xgrpo = ((pooled - local).abs() > atol).any(dim=1)
    sgt = sgt_gate(
        learner_rewards,
        peer_rewards,
        success_threshold=success_threshold,
        failure_threshold=failure_threshold,
        require_all_failed=require_all_failed,
    ).gated
    n = learner_rewards.shape[0]
    table = {
        name: (((prp == a) & (xgrpo == b) & (sgt == c)).sum().item() / n if n else float("nan"))
        for name, a, b, c in USABILITY_CELLS
    }
    return Usability(prp=prp, xgrpo=xgrpo, sgt=sgt, table=table)
