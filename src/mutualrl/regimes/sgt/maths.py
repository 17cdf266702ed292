"""Success-Gated Transfer (paper Sec. "Regime 3", Eq. regime3_total; App. "Implementation details for SGT").

    L^(n)(θ) = L_GRPO^(n)(θ) + λ · I_trigger · L_SGT^(n)(θ),   L_SGT^(n) = -log π^(n)_θ(y* | x)

SGT is the rescue of :mod:`mutualrl.regimes.core.rescue` (the one implementation opd-sgt and byte-kd share) with
its weight ``λ`` (``regime.sgt.lam``) and the paper's options: a non-strict gate, the shortest success, several rows
a prompt. This module holds what only SGT has:

- :func:`sgt_gate` — the gate with its two sides kept (the learner failed, some peer succeeded), and
  :func:`within_rescue_budget`, the gate under a rescue budget (not in the paper);
- :func:`sgt_metrics` and :func:`source_use` — gate rate, activation profile (App. "Per-prompt activation
  profile"), compute overhead (App. "Compute overhead under a fixed rollout budget"), each peer's share;
- :func:`threshold_problem` — why the thresholds cannot gate the rewards of a first step.

The adapter then takes one success per gated prompt (``choose_rescues``), puts it on the first rows of the prompt
(``rescue_rows``), weights it (``rescue_weights``) and adds its NLL (``rescue_nll``). When no prompt is gated every
step yields nothing: "if a batch contains no high-reward examples, the update is pure GRPO".
"""

from __future__ import annotations

from dataclasses import dataclass
import torch

from mutualrl.regimes.api import Share, Total, check_learner_and_peers, is_success, own_failed, within_budget
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


def sgt_gate(
    learner_rewards: torch.Tensor,
    peer_rewards: torch.Tensor,
    success_threshold: float = 0.8,
    failure_threshold: float = 0.2,
    require_all_failed: bool = True,
) -> SGTGate:
    """The SGT trigger per prompt (Sec. "Regime 3" (1) Gate; App. SGT "Gating on failure and peer success"), with
    its two sides kept for the diagnostics; the rescue's own gate (:func:`~mutualrl.regimes.core.rescue.own_failed`,
    :func:`~mutualrl.regimes.core.rescue.is_success`). For prompt ``x``, learner rewards ``r_{n,1..K}`` and peer
    rewards ``r_{m,j}``, ``m ≠ n``:

        learner_failed(x) = [∀i scorable: r_{n,i} < τ_fail] ∧ [∃i: r_{n,i} < τ_fail]    (strict: paper)
        learner_failed(x) = ∃i: r_{n,i} < τ_fail                                          (non-strict)
        peer_has_success(x) = ∃ m≠n, j: r_{m,j} > τ_succ
        gated(x) = learner_failed(x) ∧ peer_has_success(x)

    Unscorable (NaN) rollouts are neither successes nor negatives: a prompt whose learner rollouts are all
    unscorable never fires (no evidence of failure). Under the strict gate one reward between the thresholds blocks
    it, and a learner with any success is never gated (the theory gate ``Y_n(x) ∩ S_x = ∅`` when ``τ_fail ≤ τ_succ``).

    Args:
        learner_rewards: ``[P, K]``; peer_rewards: ``[P, M-1, K]``.
        success_threshold, failure_threshold: ``τ_succ``, ``τ_fail`` (paper 0.8, 0.2).
        require_all_failed: the strict gate (``regime.sgt.require_all_failed``, paper: True).
    """
    check_learner_and_peers(learner_rewards, peer_rewards)
    _check_thresholds(success_threshold, failure_threshold)
    learner_failed = own_failed(learner_rewards, failure_threshold, require_all_failed)  # [P]
    peer_success = is_success(peer_rewards, success_threshold)  # [P, M-1, K]
    peer_has_success = peer_success.flatten(1).any(dim=1)  # [P]
    return SGTGate(
        gated=learner_failed & peer_has_success,
        peer_success=peer_success,
        learner_failed=learner_failed,
        peer_has_success=peer_has_success,
    )


def within_rescue_budget(gate: SGTGate, rescued_before: torch.Tensor, max_rescues: int | None) -> SGTGate:
    """``gate`` with the prompts that used up their rescues (``regime.sgt.max_rescues_per_prompt``) taken out:
    :func:`~mutualrl.regimes.core.rescue.within_budget` on its ``gated``; ``rescued_before`` ``[P]``."""
    gated = within_budget(gate.gated, rescued_before, max_rescues)  # [P]
    if gated is gate.gated:  # no cap: the gate itself
        return gate
    return SGTGate(gated=gated, peer_success=gate.peer_success, learner_failed=gate.learner_failed,
                   peer_has_success=gate.peer_has_success)


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


def source_use(gate: SGTGate, chosen: torch.Tensor, peer_rewards: torch.Tensor,
               names: list[str]) -> dict[str, float]:
    """Per peer ``names[j]``: ``from/<peer>/used_share``, the share of its scored rollouts of these prompts that
    SGT trains on this step (a chosen success counts once, however many learner rows carry it). A ``Share``.

    Args:
        gate: this learner's :func:`sgt_gate`; chosen: ``[P, 2]`` from
            :func:`~mutualrl.regimes.core.rescue.choose_rescues`.
        peer_rewards: ``[P, M-1, K]`` (NaN = not scored); names: the peers in slot order.
    """
    slots = chosen[:, 0][gate.gated]  # [G] the chosen success's peer slot of each gated prompt
    scored = (~torch.isnan(peer_rewards)).sum(dim=(0, 2))  # [M-1]
    return {f"from/{name}/used_share": Share(float((slots == j).sum()), float(scored[j]))
            for j, name in enumerate(names)}
