"""What a policy publishes (regimes/core/adapter.py ``build_records``): token ids and behaviour log-probs straight from
TRL's padded tensors, the text without spans unless the regime's readers need spans, and a run folder of the older
SEE layout refused by name before a resume changes anything."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mutualrl.assets.tokenizers import THL_TOKENIZERS
from mutualrl.config import load_run_config
from mutualrl.regimes.core.adapter import RegimeAdapter
from mutualrl.regimes.core.registry import get_regime
from mutualrl.see import ExperienceExchange, Ragged, RolloutBatch, SchemaMismatchError
from mutualrl.thl import batch_decode_text, batch_decode_with_spans, byte_table
from mutualrl.training.adapters import adapter_class

TEXTS = ["Hello world", "Step 1: 48 / 6 = 8.", "Emoji 🦙🎉 é ü ß", "数学是科学的语言。", "", "$\\frac{a}{b}$"]


def id_rows(tok, rng: np.random.Generator) -> list[list[int]]:
    """Encodings of ordinary texts, the same cut inside a character, random ids (lossy bytes), an EOS and empty rows."""
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    emoji = tok("🦙", add_special_tokens=False)["input_ids"]
    rows += [emoji[:-1], emoji[-1:], [], rows[0] + [tok.eos_token_id]]
    rows += [rng.integers(0, len(tok), size=n).tolist() for n in (1, 7, 40)]
    table = byte_table(tok)  # ids of one byte >= 0x80: alone, not UTF-8 (the lossy decode)
    single = np.flatnonzero((table.lengths == 1) & ~table.special)  # [ids]
    high = [int(i) for i in single if table.blob[table.offsets[i]] >= 0x80][:3]
    rows += [high + rows[0], rows[0] + high[:1]]
    return rows


@pytest.mark.parametrize("name", THL_TOKENIZERS)
def test_the_text_alone_is_the_text_of_the_span_decode(thl_tokenizers, name):
    tok = thl_tokenizers[name]
    rows = id_rows(tok, np.random.default_rng(0))
    want = [d.text for d in batch_decode_with_spans(tok, rows)]
    assert batch_decode_text(tok, rows) == want
    flat = Ragged.from_rows(rows, np.int32)
    assert batch_decode_text(tok, flat) == want  # the flat layout build_records passes: the same text
    for i in range(len(rows)):  # one row at a time takes the row-by-row decode (lossy where bytes are invalid)
        assert batch_decode_text(tok, rows[i:i + 1]) == want[i:i + 1]
    assert any("\ufffd" in t for t in want)  # the lossy decode was exercised


def adapter_for(tok, publishes_traces: bool, publishes_spans: bool) -> RegimeAdapter:
    adapter = RegimeAdapter(SimpleNamespace(pool=SimpleNamespace(policies=[])), "a")
    adapter.trainer = SimpleNamespace(processing_class=tok, eos_token_ids=[tok.eos_token_id])
    adapter.publishes_traces, adapter.publishes_spans = publishes_traces, publishes_spans
    return adapter


def trl_step(tok, dtype: torch.dtype):
    """TRL's batch of 5 completions (one empty, two ended by EOS) and this rank's StepRollouts of it."""
    texts = ["1+1=2", " The answer is 4", "", "x", "wörld 🦙"]
    rows = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    rows[1].append(tok.eos_token_id)
    rows[3].append(tok.eos_token_id)
    width = max(map(len, rows)) + 2  # padding past every row, as TRL pads
    ids = torch.full((len(rows), width), tok.eos_token_id)  # [B, C] padded with the pad id (EOS here)
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, C]
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        mask[i, :len(r)] = 1
    logps = -torch.rand((len(rows), width), generator=torch.Generator().manual_seed(0)).to(dtype)  # [B, C]
    output = {"completion_ids": ids, "completion_mask": mask, "old_per_token_logps": logps,
              "advantages": torch.linspace(-1, 1, len(rows))}
    rollouts = SimpleNamespace(completion_ids_local=rows, lengths_local=np.array([len(r) for r in rows]),
                               prompt_ids_local=[f"p{i // 5}" for i in range(5)],
                               sample_index_local=list(range(5)), prompt_texts_local=["q"] * 5,
                               rewards_local=torch.tensor([1.0, 0.0, float("nan"), 1.0, 0.0]))
    return output, rollouts


def list_built(tok, output, rollouts) -> RolloutBatch:
    """The batch as build_records made it on 2026-11-25 (per-row Python lists), for comparison."""
    decoded = batch_decode_with_spans(tok, rollouts.completion_ids_local)
    mask = output["completion_mask"].bool()
    logps = output["old_per_token_logps"]
    return RolloutBatch(
        prompt_id=rollouts.prompt_ids_local, sample_index=rollouts.sample_index_local,
        prompt_text=list(rollouts.prompt_texts_local), response_text=[d.text for d in decoded],
        response_token_ids=[list(ids) for ids in rollouts.completion_ids_local],
        response_token_spans=[d.spans for d in decoded], reward=rollouts.rewards_local.float().numpy(),
        advantage=output["advantages"].float().cpu().numpy(),
        behaviour_logps=[logps[i][mask[i]].float().cpu().numpy() for i in range(logps.size(0))],
        finished=[bool(ids) and ids[-1] == tok.eos_token_id for ids in rollouts.completion_ids_local])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_records_from_padded_tensors_are_the_same_bytes_on_disk(thl_tokenizers, tmp_path, dtype):
    tok = thl_tokenizers["gpt2"]
    output, rollouts = trl_step(tok, dtype)
    built = adapter_for(tok, True, True).build_records(output, rollouts)
    files = []
    for name, batch in (("padded", built), ("lists", list_built(tok, output, rollouts))):
        files.append(ExperienceExchange(tmp_path / name, "run", "a").publish(0, batch).read_bytes())
    assert files[0] == files[1]
    assert built.column("finished").to_pylist() == [False, True, False, True, False]
    assert built.ragged("response_token_ids").lengths.tolist() == list(map(len, rollouts.completion_ids_local))


def test_without_readers_of_spans_only_the_text_is_published(thl_tokenizers):
    tok = thl_tokenizers["qwen3"]
    output, rollouts = trl_step(tok, torch.float32)
    with_spans = adapter_for(tok, False, True).build_records(output, rollouts).to_table()
    text_only = adapter_for(tok, False, False).build_records(output, rollouts).to_table()
    assert text_only.column("response_token_spans").null_count == 5
    assert text_only.column("behaviour_logps").null_count == 5
    same = ["response_token_spans", "reward"]  # reward: NaN (not scored) is never equal to itself
    assert text_only.drop_columns(same).equals(with_spans.drop_columns(same))
    np.testing.assert_array_equal(text_only["reward"].to_numpy(), with_spans["reward"].to_numpy())


@pytest.mark.parametrize(("regime", "settings", "spans"), [
    ("prp", ["regime.prp.denominator=peer"], True),
    ("prp", ["regime.prp.denominator=peer", "regime.prp.correction=tis"], True),  # a correction aligns the traces
    ("hacpo", [], True),
    ("prp", ["regime.prp.denominator=learner", "regime.prp.correction=none"], False),
    ("xgrpo", [], False),
    ("sgt", [], False),
])
def test_a_regime_publishes_spans_only_where_its_readers_need_them(regime, settings, spans):
    config = load_run_config("tiny", regime=regime, overrides=settings, check_grpo=False).config
    spec = get_regime(regime)
    adapter = adapter_class(spec)(config, config.pool.policies[0].name, None, spec=spec)
    assert adapter.publishes_spans is spans
    if spans:
        assert "response_token_spans" in adapter.peer_columns


def test_a_resume_of_an_exchange_of_the_older_layout_is_refused_before_anything_changes(tmp_path):
    from rich.console import Console

    from mutualrl.launch.rundir.prepare import prepare_launch
    from mutualrl.run_folder import RunPaths

    config = load_run_config("tiny", check_grpo=False).config
    paths = RunPaths(tmp_path / "run")
    paths.config.parent.mkdir(parents=True, exist_ok=True)
    paths.config.write_text("stored config\n")
    see = paths.see_root(config.see.dir)
    shard = see / "step-000002" / "tiny-bpe"
    shard.mkdir(parents=True)
    manifest = {"schema_version": 1, "run_id": "r", "policy": "tiny-bpe", "step": 2, "rank": 0, "world_size": 1,
                "rows": 4, "bytes": 10, "checksum": "0" * 32}
    (shard / "rank-0-of-1.manifest.json").write_text(json.dumps(manifest))
    before = sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    with pytest.raises(SchemaMismatchError, match=rf"^{see} was written by an older mutualrl \(SEE schema v1"):
        prepare_launch(paths, config, "tiny", True, [], Console(file=None, quiet=True))
    assert sorted((p, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


def test_a_row_cut_by_mask_truncated_completions_still_publishes_one_log_prob_per_token(thl_tokenizers, tmp_path):
    """TRL's mask_truncated_completions zeroes a cut row's completion_mask, not its tokens or log-probs: taken
    through the mask, the row had no log-prob for its tokens (an invalid shard every peer refused)."""
    tok = thl_tokenizers["gpt2"]
    output, rollouts = trl_step(tok, torch.float32)
    output["completion_mask"][0] = 0  # row 0 ("1+1=2") ends without EOS: cut
    built = adapter_for(tok, True, True).build_records(output, rollouts)
    ExperienceExchange(tmp_path, "run", "b").publish(0, built)
    read = ExperienceExchange(tmp_path, "run", "a", policies=["a", "b"]).read(0, "b")
    n = len(rollouts.completion_ids_local[0])
    np.testing.assert_array_equal(read["behaviour_logps"][0].values.to_numpy(),
                                  output["old_per_token_logps"][0, :n].numpy())


def test_the_published_trace_is_the_engines_sampling_log_probs_where_vllm_gave_them():
    """TRL's GPU branch (vLLM with its importance-sampling pass) puts the engine's sampling log-probs in
    ``sampling_per_token_logps``, NaN where the engine left a token unscored: the trace a peer divides by is the
    engine's, the trainer's on those tokens; without vLLM's, the trainer's own."""
    import torch

    from mutualrl.regimes.core.publication import behaviour_trace

    trainer = torch.tensor([[-1.0, -2.0, -3.0]])
    engine = torch.tensor([[-1.5, float("nan"), -2.5]])
    assert torch.equal(behaviour_trace({"old_per_token_logps": trainer, "sampling_per_token_logps": engine}),
                       torch.tensor([[-1.5, -2.0, -2.5]]))
    assert torch.equal(behaviour_trace({"old_per_token_logps": trainer}), trainer)
    assert behaviour_trace({"sampling_per_token_logps": engine}) is engine
