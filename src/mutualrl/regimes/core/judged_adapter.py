"""The base adapter of a regime whose peers judge its own rollouts (OPD, opd-sgt): it publishes its token spans (the
peers' judgements are aligned onto them), keeps the records it published (the text the peers judge) and opens the
nested judgement exchange once bound (:class:`~mutualrl.regimes.core.judgements.JudgementChannel`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.judgements import (DISTRIBUTION_COLUMNS, JUDGEMENT_COLUMNS, JudgementChannel, judge_rollouts,
                                              timed)
from mutualrl.regimes.core.trainer_interface import GRPOBatch, StepRollouts, TrainerView

if TYPE_CHECKING:
    import pyarrow as pa


class JudgedAdapter(RegimeAdapter):
    peer_columns = ("prompt_id", "sample_index", "reward", "response_text", "finished")
    publishes_spans = True  # its own spans, kept from its records: its peers' judgements are aligned onto them
    top_bytes = 0  # > 0: the judges also publish their next-byte distributions, this many symbols per token
    byte_covers: Any = None  # a CoverLimits: those distributions exact, at every byte offset (byte-kd's 'exact')
    text_limits: Any = None  # a CoverLimits: the judges also publish each text's log-probability over its tokenizations

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.channel: JudgementChannel | None = None
        self.own_records: pa.Table | None = None

    def bind(self, trainer: TrainerView) -> None:
        super().bind(trainer)
        if self.exchange is not None:
            self.channel = JudgementChannel(self.exchange, self.peers)

    def build_records(self, output: GRPOBatch, rollouts: StepRollouts) -> Any:
        records = super().build_records(output, rollouts)
        self.own_records = records.to_table()  # the text and spans the peers judge, as published
        return records

    def exchange_judgements(self, output: GRPOBatch, rollouts: StepRollouts,
                            peers: dict[str, pa.Table]) -> tuple[Any, dict[str, pa.Table]]:
        """Judge every peer rollout of this rank's groups and publish the judgements; then wait for the peers'
        judgements of this policy's rollouts: (this rank's judging, with its ``rows``; the peers' judgement tables)."""
        rollouts.require_whole_groups(self.name)
        step = rollouts.step
        judged, judge_s = timed(lambda: judge_rollouts(self.trainer, output, rollouts, peers, self.peers,
                                                       self.top_bytes, self.byte_covers, self.text_limits))
        for name, records in judged.records.items():
            self.channel.publish(step, name, records)
        columns = JUDGEMENT_COLUMNS + (DISTRIBUTION_COLUMNS if self.top_bytes else ()) + (
            ("advantage",) if self.text_limits is not None else ())
        with self.phase("waiting for peers' judgements"):
            tables, wait_s = timed(lambda: self.channel.read(step, self.peers, columns))
        self.trainer.record_metrics({"mutual/judge_s": judge_s, "mutual/judgements_wait_s": wait_s})
        return judged, tables

    @staticmethod
    def _items(output: GRPOBatch) -> float:
        """The step's completion tokens over all ranks (TRL's ``num_items_in_batch``; this rank's where absent)."""
        items = output.get("num_items_in_batch")
        return float(output["completion_mask"].sum() if items is None else items)

    def prune_records(self, step: int) -> None:
        super().prune_records(step)
        if self.channel is not None:
            self.channel.prune(step)
