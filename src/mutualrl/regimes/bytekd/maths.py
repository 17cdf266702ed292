"""Next-byte distillation across tokenizers (beyond the paper; GKD's on-policy distillation, arXiv 2306.13649).

What follows is ``distribution: canonical``, an approximation: each ``q`` is the next-token distribution after the
model's own tokens only. ``distribution: exact`` (the default; :mod:`mutualrl.regimes.bytekd.exact`) sums over every
tokenization covering the text and compares at every byte offset; :func:`symbol_kl` is the divergence of both.

The learner ``θ`` samples ``y ~ π_θ(· | x)``; a teaching peer ``T`` scores the same text in its own tokens. At an
offset ``o`` of ``y`` where both tokenizations have a token boundary (a *shared boundary*), each model's next-token
distribution gives a distribution over the next byte (:mod:`mutualrl.regimes.core.next_bytes`):

    q_θ(b | y_<o) = Σ_{v : first byte of v = b} π_θ(v | x, y_<o)        (the learner's tokens of y_<o)
    q_T(b | y_<o) = Σ_{u : first byte of u = b} π_T(u | x, y_<o)        (the peer's tokens of y_<o)

over the same 258 symbols whatever the vocabularies. The peer publishes its ``k`` most likely symbols ``S`` and their
masses; the rest is one cell ``R`` (mass ``1 − Σ_S q_T``; the learner's is the mass of every other symbol), so the
divergence is exact for the partition ``S ∪ {R}`` (generalised where the learner cannot write ``R``: below):

    KL_o = Σ_{c ∈ S ∪ {R}} q_T(c) (log q_T(c) − log q_θ(c))
    L    = λ Σ_j w_{p,j} Σ_{o shared} KL^j_o                   reduced over the batch as TRL reduces its per-token loss

``w_{p,j}`` is 1 for the best peer whose success rate on prompt ``p`` is above the learner's, 0 for the others
(:func:`teaching_gate`; with ``gate: blind-spot`` only where every own rollout of ``p`` failed).

A symbol the learner's vocabulary cannot write (no token starts with it) joins ``R``. Its gradient on the learner's
logit ``z_v`` at the boundary, ``v`` in cell ``c(v)``:

    ∂KL_o / ∂z_v = π_θ(v) (1 − q_T(c(v)) / q_θ(c(v)))          summed over a cell: q_θ(c) − q_T(c)

so it points at bytes the learner gives no mass to, which a signal on its own samples alone cannot (OPD's reverse
KL only reweights what it samples). Each ``q`` is its model's next-byte mass after its own prompt and its own
tokens of the same text, where its tokenization has a boundary; between shared boundaries (inside a token of either)
no comparison is made. At offset 0 each model continues its own chat template, so a convention of one (a leading
space after the prompt) is taught as any other byte. Where the learner cannot write any symbol of the rest, the rest
cell's term is its teacher mass ``q_T(R)``, a constant: the sum is then the generalised KL over the learner's
cells, ``Σ q_T log(q_T / q_θ) − Σ q_T + Σ q_θ`` (``Σ q_θ = 1`` there), ``≥ 0`` up to float rounding where the
plain sum over them can be negative, with the same gradient (the true KL is infinite: the teacher has mass the
learner cannot write).
"""

from __future__ import annotations

import numpy as np
import torch

from mutualrl.regimes.api import SYMBOLS, check_float, every_own_failed, teaching_peers

FLOOR = -1.0e4
"""A log-mass standing for a symbol the learner's vocabulary cannot write (a constant: no gradient)."""


def teaching_gate(own_rate: torch.Tensor, peer_rates: torch.Tensor, own_rewards: torch.Tensor,
                  failure_threshold: float, gate: str) -> torch.Tensor:
    """bool ``[P, J]``: the peers whose distribution teaches each prompt. ``competence``: a peer whose success rate
    (``peer_rates`` ``[P, J]``) is above the learner's (``own_rate`` ``[P]``); ``blind-spot``: the same, only where
    every own rollout (``own_rewards`` ``[P, K]``) is below ``failure_threshold`` (there the learner's rate is 0, so a
    teaching peer has a verified success: SGT's rescue gate without its budget)."""
    teaching = teaching_peers(own_rate, peer_rates, "competence")  # [P, J]
    if gate == "blind-spot":
        return teaching & every_own_failed(own_rewards, failure_threshold)[:, None]  # [P, J]
    if gate != "competence":
        raise ValueError(f"gate must be 'competence' or 'blind-spot'; got {gate!r}")
    return teaching


def shared_boundaries(own_starts: np.ndarray, judge_starts: np.ndarray) -> np.ndarray:
    """int64 ``[n]``: for each learner token, the judge token that starts at the same offset where both start on a
    boundary of their tokenization (:func:`~mutualrl.regimes.core.next_bytes.clean_starts`), else -1."""
    where = {int(offset): i for i, offset in enumerate(judge_starts.tolist()) if offset >= 0}
    return np.fromiter((where.get(int(offset), -1) if offset >= 0 else -1 for offset in own_starts.tolist()),
                       dtype=np.int64, count=len(own_starts))


def symbol_kl(own_logq: torch.Tensor, teacher_ids: torch.Tensor, teacher_logps: torch.Tensor,
              weights: torch.Tensor) -> torch.Tensor:
    """``Σ_j w_{j,t} KL(q_j ‖ q_θ)`` per learner position, float32 ``[B, T]``, over each judge's cells ``S ∪ {R}``
    (module docstring; the generalised KL where the learner cannot write ``R``). ``own_logq`` ``[B, T, 258]``: the
    learner's next-byte log-masses (``-inf``: a symbol it cannot write); ``teacher_ids`` int ``[B, J, T, k]`` and
    ``teacher_logps`` ``[B, J, T, k]``: each judge's published symbols and log-masses there; ``weights``
    ``[B, J, T]``: the teacher weight at a shared boundary, 0 elsewhere (a position with weight 0 contributes an
    exact 0, whatever its values)."""
    check_float("own_logq", own_logq, 3, "[B, T, 258]")
    b, t, width = own_logq.shape
    if width != SYMBOLS or teacher_ids.shape[0] != b or teacher_ids.shape[2] != t or teacher_ids.dim() != 4:
        raise ValueError(f"own_logq must be [B, T, {SYMBOLS}] and teacher_ids [B={b}, J, T={t}, k]; got "
                         f"{tuple(own_logq.shape)} and {tuple(teacher_ids.shape)}")
    if teacher_logps.shape != teacher_ids.shape or weights.shape != teacher_ids.shape[:3]:
        raise ValueError(f"teacher_logps must have teacher_ids' shape {tuple(teacher_ids.shape)} and weights "
                         f"{tuple(teacher_ids.shape[:3])}; got {tuple(teacher_logps.shape)}, {tuple(weights.shape)}")
    taught = weights > 0  # [B, J, T]
    ids = torch.where(taught[..., None], teacher_ids.long(), torch.zeros_like(teacher_ids, dtype=torch.long))
    own = torch.where(torch.isfinite(own_logq), own_logq, torch.full_like(own_logq, FLOOR))  # [B, T, 258]
    own = own[:, None].expand(b, ids.shape[1], t, SYMBOLS)  # [B, J, T, 258]
    own_at = own.gather(-1, ids)  # [B, J, T, k]
    writable = (own_at > FLOOR / 2) & taught[..., None]  # [B, J, T, k] cells the learner can write
    teacher_q = torch.where(writable, teacher_logps.float().exp(), torch.zeros_like(own_at))  # [B, J, T, k]
    cells = torch.zeros_like(own, dtype=torch.bool).scatter(-1, ids, writable)  # [B, J, T, 258] the symbols of S
    outside = torch.where(cells, torch.full_like(own, FLOOR), own)  # [B, J, T, 258] the learner's rest, FLOOR in S
    own_rest = torch.logsumexp(outside, dim=-1)  # [B, J, T]
    rest_writable = (outside > FLOOR / 2).any(-1)  # [B, J, T] the rest holds a symbol the learner can write
    teacher_rest = (1.0 - teacher_q.sum(-1)).clamp(min=0.0)  # [B, J, T]
    safe_log = torch.where(teacher_q > 0, teacher_logps.float(), torch.zeros_like(own_at))  # [B, J, T, k]
    in_s = (teacher_q * (safe_log - own_at)).sum(-1)  # [B, J, T]
    rest = torch.where((teacher_rest > 0) & rest_writable,
                       teacher_rest * (torch.log(teacher_rest.clamp(min=1e-30)) - own_rest),
                       teacher_rest)  # [B, J, T] (a rest the learner cannot write: its mass, the generalised KL's)
    per_judge = torch.where(taught, in_s + rest, torch.zeros_like(rest))  # [B, J, T]
    return (weights.float() * per_judge).sum(1)  # [B, T]
