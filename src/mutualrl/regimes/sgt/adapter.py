"""Outcome-level adapter: Success-Gated Transfer (paper Sec. "Regime 3", App. SGT details).

Per learner and prompt, the gate fires when the learner's K rollouts failed (every scored one; any one
with ``require_all_failed: false``) and a peer has a success (a reward above ``success_threshold``); one
peer success is retokenized into the learner's vocabulary (THL), attached to the learner's rows of that
prompt (up to ``max_pairs_per_prompt``), and :meth:`SGTAdapter.extra_loss` adds ``lambda * NLL`` on it
(Eq. regime3_total). Rows outside the rescue subset carry zero weight. The SEE does not filter by
reward: SGT reads six columns of every peer row (``peer_columns``) and finds the successes itself.
With one process, a step with no gated prompt adds no key to the batch, so the update is exactly pure
GRPO; with several ranks every rank attaches the SGT keys at every step (all weights zero where nothing
is gated) so that all run the same forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import torch

from mutualrl.regimes.api import (
    GRPOBatch,
    PeerGroups,
    RegimeAdapter,
    RescueBudget,
    Share,
    StepRollouts,
    anchored_advantages,
    anchored_rollouts,
    attach_sequences,
    attached_rows,
    choose_rescues,
    gather_peer_groups,
    learner_responses,
    rescue_logprob,
    rescue_nll,
    rescue_rows,
    rescue_weights,
    solved_prompts,
)
from mutualrl.regimes.sgt.spec import RESCUES_TOTAL_KEY, SGT, SGTSettings

if TYPE_CHECKING:
    import pyarrow as pa

    from mutualrl.regimes.sgt.maths import SGTGate

SGT_SOURCE: Final = "sgt_source"
"""Batch rows ``[B]``: the peer (its place in the adapter's ``peers``) whose success a gated row carries; -1 else."""


@dataclass
class OwnRound:
    """This rank's K-groups of one round: prompt ids, learner rewards ``[P, K]`` and, for an earlier
    round, the prompts' token rows (left-padded, one per rollout row) to score a rescue against."""

    groups: list[str]
    rewards: torch.Tensor  # float [P, K]
    prompt_ids: torch.Tensor | None = None  # int64 [B, P'] an earlier round's prompt rows; None: this step's
    prompt_mask: torch.Tensor | None = None  # int64 [B, P']


def logged_total(log_history: list[dict[str, Any]]) -> int:
    """The last ``sgt/rescues_total`` a trainer logged (0 if none): TRL restores ``log_history`` from the checkpoint
    a run resumes from, so the counter continues across ``--resume`` instead of restarting at 0."""
    for row in reversed(log_history or []):
        if RESCUES_TOTAL_KEY in row:
            return int(round(row[RESCUES_TOTAL_KEY]))
    return 0


class SGTAdapter(RegimeAdapter):
    spec = SGT
    settings: SGTSettings  # typed view of RegimeAdapter.settings (a variant's subclass of SGTSettings)
    peer_columns = ("prompt_id", "sample_index", "reward", "response_text", "finished", "num_tokens")
    uses_stale_rounds = True  # transform_stale rescues an earlier round's groups (see.max_staleness)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rescues = RescueBudget("sgt", self.settings.rescue_reduction)  # its counts; per prompt under a cap
        self.history: dict[int, OwnRound] = {}
        self.thresholds_checked = False
        self.total_restored = False

    def state_dict(self) -> dict[str, Any]:
        """The rescue counter (``sgt/rescues_total``), exact at the checkpoint (the last logged total lags it by up to
        ``logging_steps - 1`` steps), and under ``max_rescues_per_prompt`` the steps that rescued each prompt. The
        groups kept for stale rounds are not state: a resumed policy's staleness window starts at its first resumed
        step, and it reads no round before it."""
        return self.rescues.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescues.load_state_dict(state)
        self.total_restored = True  # a checkpoint without this state (older) restores it from the logged total

    def warn_thresholds(self, own: torch.Tensor, peers: dict[str, pa.Table]) -> None:
        """Log once when this step's rewards (own and peers') lie where SGT's thresholds can never gate."""
        import logging

        from mutualrl.regimes.sgt.maths import threshold_problem

        seen = [own.float().flatten()] + [torch.tensor(t.column("reward").to_numpy(), dtype=torch.float32)  # [R]
                                          for t in peers.values() if t is not None and "reward" in t.column_names]
        settings = self.settings
        problem = threshold_problem(torch.cat(seen), settings.success_threshold, settings.failure_threshold)
        if problem is not None:
            logging.getLogger("mutualrl.sgt").warning("policy %s, SGT at its first step: %s (docs/regimes.md)",
                                                      self.policy, problem)

    def remember(self, output: GRPOBatch, rollouts: StepRollouts) -> None:
        """Under bounded staleness, keep this rank's groups of the last S+1 rounds: a later step may rescue them."""
        staleness = self.config.see.max_staleness
        if staleness == 0:
            return
        own = self.own_round(rollouts)
        self.history[rollouts.step] = OwnRound(own.groups, own.rewards.clone(), output["prompt_ids"].detach().clone(),
                                               output["prompt_mask"].detach().clone())
        for old in sorted(self.history)[:-(staleness + 1)]:
            del self.history[old]

    def own_round(self, rollouts: StepRollouts) -> OwnRound:
        """This rank's K-groups of the step and the learner's rewards ``[P, K]`` (whole groups required)."""
        rollouts.require_whole_groups(self.name)
        k = rollouts.num_generations
        groups = rollouts.prompt_ids_local[::k]
        return OwnRound(groups, rollouts.rewards_local.view(len(groups), k))

    def transform(self, output: GRPOBatch, rollouts: StepRollouts,
                  peers: dict[str, pa.Table]) -> tuple[GRPOBatch, dict[str, float]]:
        if not self.thresholds_checked:  # once, at the first step: a gate that cannot fire says so
            self.thresholds_checked = True
            self.warn_thresholds(rollouts.rewards_global, peers)
        return self._anchor(*self._rescue(output, rollouts, peers, self.own_round(rollouts), rollouts.step), rollouts)

    def _anchor(self, output: GRPOBatch, metrics: dict[str, float],
                rollouts: StepRollouts) -> tuple[GRPOBatch, dict[str, float]]:
        """With ``anchor_lam``: this step's verified own successes of the prompts they all solved get ``α`` added to
        their advantage (:mod:`mutualrl.regimes.core.success_anchor`)."""
        alpha = self.settings.anchor_lam
        if alpha == 0:
            return output, metrics
        k = rollouts.num_generations
        own_rewards = rollouts.rewards_local.float().view(-1, k)  # [P, K]
        solved = solved_prompts(own_rewards, self.settings.success_threshold)  # [P]
        lifted = anchored_rollouts(own_rewards, self.settings.success_threshold)  # [P, K]
        output["advantages"] = anchored_advantages(output["advantages"], lifted, alpha)  # [B]
        metrics["anchored_rate"] = Share(float(solved.sum()), len(solved))
        return output, metrics

    def transform_stale(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table],
                        peer_step: int) -> tuple[GRPOBatch, dict[str, float]]:
        """Rescue the prompts of an earlier round ``peer_step`` (their own prompt tokens ride along;
        :meth:`remember` checked this step's groups)."""
        if peer_step not in self.history:
            from mutualrl.regimes.api import UsageError

            raise UsageError(f"SGT keeps its own groups of the last see.max_staleness + 1 = "
                             f"{self.config.see.max_staleness + 1} rounds; round {peer_step} is older (replaying a run "
                             "with a larger see.max_staleness? set the same value)")
        return self._anchor(*self._rescue(output, rollouts, peers, self.history[peer_step], peer_step), rollouts)

    def _rescue(self, output: GRPOBatch, rollouts: StepRollouts, peers: dict[str, pa.Table], own: OwnRound,
                step: int) -> tuple[GRPOBatch, dict[str, float]]:
        """SGT on ``own``'s groups (this step's or an earlier round's) against the peers' records of ``step``."""
        from mutualrl.regimes.sgt.maths import sgt_metrics, source_use

        settings = self.settings
        k = rollouts.num_generations
        peer, gate, chosen, row_mask, over_budget = self._gate(peers, own, k, step)
        gated_prompts, sources = self._chosen_successes(peer, gate, chosen, len(own.groups))
        flat_mask = row_mask.reshape(-1)
        num_gated = self._sum_over_ranks(int(flat_mask.sum()), rollouts)
        extra_tokens = 0
        # Several ranks (DDP / ZeRO): every rank must run the same forward passes, so the SGT
        # fields are attached at every step and the extra pass runs even with no gated rows (weight 0).
        if gated_prompts or rollouts.num_processes > 1:
            extra_tokens = self._attach_rescues(output, rollouts, own, gated_prompts, peers, sources, flat_mask,
                                                num_gated)

        if not self.total_restored:  # a resumed run goes on counting from its checkpoint's logged total
            self.total_restored = True
            self.rescues.rescues_total = max(self.rescues.rescues_total, logged_total(self.trainer.state.log_history))
        # every rank's rescued prompts; per prompt only under a budget (a prompt may fall to another rank next time)
        rescued = self.rescues.count(own.groups, gate.gated, rollouts, settings.max_rescues_per_prompt is not None)
        rollout_tokens = int(output["completion_mask"].sum().item())
        metrics = sgt_metrics(gate, own.rewards, peer.values["reward"], extra_tokens=extra_tokens,
                              rollout_tokens=rollout_tokens, m=len(self.peers) + 1, k=k,
                              success_threshold=settings.success_threshold,
                              max_pairs_per_prompt=settings.max_pairs_per_prompt)
        metrics.update(source_use(gate, chosen, peer.values["reward"], self.peers))
        metrics["rescues"] = rescued
        metrics["rescues_total"] = self.rescues.rescues_total
        if settings.max_rescues_per_prompt is not None:  # the same on every rank: all take part in the sum
            metrics["over_budget"] = self._sum_over_ranks(over_budget, rollouts)
        return output, metrics

    def _gate(self, peers: dict[str, pa.Table], own: OwnRound, k: int,
              step: int) -> tuple[PeerGroups, SGTGate, torch.Tensor, torch.Tensor, int]:
        """The gate per prompt (all K own rollouts failed, a peer succeeded, the prompt's rescue budget not spent), the
        peer success chosen for each gated prompt (seeded per step, policy and regime), the learner rows it rescues,
        and how many prompts only the budget kept out."""
        from mutualrl.regimes.sgt.maths import sgt_gate, within_rescue_budget

        settings = self.settings
        peer = gather_peer_groups(peers, self.peers, own.groups, k, step, columns=("reward", "num_tokens"))
        peer_rewards, peer_lengths = peer.values["reward"], peer.values["num_tokens"]

        unbudgeted = sgt_gate(own.rewards, peer_rewards, success_threshold=settings.success_threshold,
                              failure_threshold=settings.failure_threshold,
                              require_all_failed=settings.require_all_failed)
        before = self.rescues.rescued_before(own.groups)  # [P]
        gate = within_rescue_budget(unbudgeted, before, settings.max_rescues_per_prompt)
        over_budget = int((unbudgeted.gated & ~gate.gated).sum())
        generator = self.seeded_generator(step, self.name)
        chosen = choose_rescues(peer_rewards, gate.gated, settings.success_threshold, generator,
                                selection=settings.selection, peer_lengths=peer_lengths)  # [P, 2]
        row_mask = rescue_rows(gate.gated, k, settings.max_pairs_per_prompt)  # [P, K]
        return peer, gate, chosen, row_mask, over_budget

    def _chosen_successes(self, peer: PeerGroups, gate: SGTGate, chosen: torch.Tensor,
                          n_groups: int) -> tuple[list[int], list[tuple[str, int]]]:
        """The gated prompts and, for each, the chosen peer success as ``(peer, row)`` of its table."""
        gated_prompts = [p for p in range(n_groups) if bool(gate.gated[p])]
        sources = []
        for p in gated_prompts:
            m, j = int(chosen[p, 0]), int(chosen[p, 1])  # chosen: int64 [P, 2] (peer, sample)
            sources.append((self.peers[m], int(peer.rows[p, m, j])))
        return gated_prompts, sources

    def _sum_over_ranks(self, count: int, rollouts: StepRollouts) -> int:
        """``count`` summed over the ranks (every rank takes part in the collective, gated or not)."""
        if rollouts.num_processes > 1:
            accelerator = self.trainer.accelerator
            return int(accelerator.reduce(torch.tensor(count, device=accelerator.device), reduction="sum").item())
        return count

    def _attach_rescues(self, output: GRPOBatch, rollouts: StepRollouts, own: OwnRound, gated_prompts: list[int],
                        peers: dict[str, pa.Table], sources: list[tuple[str, int]], flat_mask: torch.Tensor,
                        num_gated: int) -> int:
        """The rescues ``sources`` in the learner's vocabulary (THL, EOS appended where the peer finished:
        :func:`~mutualrl.regimes.core.peer_responses.learner_responses`), put on the gated rows of ``output`` with their
        weights (Eq. regime3_total); returns the rescue tokens added."""
        trainer = self.trainer
        k = rollouts.num_generations
        sequences = learner_responses(peers, sources, trainer.processing_class, trainer.max_completion_length).ids
        width = max([1] + [len(ids) for ids in sequences])
        device = output["completion_ids"].device
        pad = trainer.processing_class.pad_token_id
        extra_tokens = 0
        n_local = len(rollouts.prompt_ids_local)
        rows: list[list[int]] = [[] for _ in range(n_local)]  # the rescue target on gated rows only
        source_index = [-1] * n_local  # the rescue's peer (its place in self.peers) on gated rows
        for p, ids, (name, _) in zip(gated_prompts, sequences, sources, strict=True):
            for i in range(p * k, (p + 1) * k):
                if flat_mask[i]:
                    rows[i], source_index[i] = ids, self.peers.index(name)
                    extra_tokens += len(ids)
        attach_sequences(output, rows, pad, width, "sgt")  # sgt_completion_ids, sgt_completion_mask: [B_local, R]
        weights = rescue_weights(flat_mask, self.settings.lam, trainer.args.steps_per_generation,
                                 trainer.current_gradient_accumulation_steps, num_gated=num_gated,
                                 num_processes=rollouts.num_processes)  # [B_local]
        output["sgt_weight"] = weights.to(device=device, dtype=torch.float32)
        output[SGT_SOURCE] = torch.tensor(source_index, dtype=torch.long, device=device)  # [B_local]
        if own.prompt_ids is not None:  # an earlier round: its prompts, not this step's
            output["sgt_prompt_ids"] = own.prompt_ids.to(device)
            output["sgt_prompt_mask"] = own.prompt_mask.to(device)
        return extra_tokens

    def source_logps(self, logps: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
                     sources: torch.Tensor) -> dict[str, float]:
        """Per peer with a rescue in this micro-batch, ``from/<peer>/rescue_logp``: the learner's mean sequence
        log-prob of that peer's rescued answers, read from the NLL forward (no pass of its own)."""
        out = {}
        for m, peer in enumerate(self.peers):
            mine = torch.where(sources == m, weights, torch.zeros_like(weights))  # [R]
            if bool((mine > 0).any()):
                out[f"from/{peer}/rescue_logp"] = rescue_logprob(logps, mask, mine)
        return out

    def extra_loss(self, model: torch.nn.Module, inputs: GRPOBatch) -> torch.Tensor | None:
        trainer = self.trainer
        attached = attached_rows(inputs, "sgt", trainer.accelerator.num_processes)
        if attached is None:
            return None
        rows, completion, mask = attached  # [R], [R, T'], [R, T']
        weights = inputs["sgt_weight"]  # [B]
        prompt_ids = inputs.get("sgt_prompt_ids", inputs["prompt_ids"])
        prompt_mask = inputs.get("sgt_prompt_mask", inputs["prompt_mask"])
        logps = trainer.score_completions(model, prompt_ids[rows], prompt_mask[rows], completion, mask)
        loss = rescue_nll(logps, mask, weights[rows], self.settings.rescue_reduction)
        values = {"nll_term": loss.detach().item()}
        logp = rescue_logprob(logps.detach(), mask, weights[rows])
        if logp == logp:  # not NaN: some row of this micro-batch carries a rescue
            values["rescue_logp"] = logp
        values.update(self.source_logps(logps.detach(), mask, weights[rows], inputs[SGT_SOURCE][rows]))
        trainer.record_metrics({f"{self.name}/{key}": value for key, value in values.items()},
                               mode="train" if model.training else "eval")
        return loss
