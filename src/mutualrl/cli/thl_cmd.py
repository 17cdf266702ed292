"""``mutualrl thl-check``: THL conservation and alignment diagnostics (paper App. "Sanity checks on
THL word alignment" and App. "THL alignment diagnostics")."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table

from mutualrl.cli.common import console, report_errors
from mutualrl.errors import UsageError
from mutualrl.evaluation.results import NO_VALUE

if TYPE_CHECKING:
    from mutualrl.thl.check import Policy

_PAIR_COLUMNS = [
    ("source", "Source"), ("target", "Target"), ("n_texts", "Texts"), ("n_words", "Units"),
    ("src_to_aligned_mae", "Src→Aligned MAE"), ("src_to_aligned_max", "Src→Aligned Max"),
    ("aligned_to_target_mae", "Aligned→Target MAE"), ("aligned_to_target_max", "Aligned→Target Max"),
    ("prefix_leak_max", "Prefix Leak Max"), ("residual_abs_max", "|R_THL| max"), ("n_merged_units", "Merged"),
]


def _pairs(sources: list[str], targets: list[str], cross: bool) -> list[tuple[str, str]]:
    if cross:
        return list(itertools.product(sources, targets))
    if len(sources) == len(targets):
        return list(zip(sources, targets, strict=True))
    if len(sources) == 1:
        return [(sources[0], t) for t in targets]
    if len(targets) == 1:
        return [(s, targets[0]) for s in sources]
    raise UsageError(
        f"{len(sources)} --source and {len(targets)} --target values: give equally many (zipped into pairs), "
        "one of either (broadcast), or --cross for every combination"
    )


def _cell(value: Any) -> str:
    """A diagnostics value: floats to 4 significant digits (tiny ones in e-notation), None as every table shows it."""
    if value is None:
        return NO_VALUE
    if isinstance(value, float):
        return "0" if value == 0 else (f"{value:.4g}" if abs(value) >= 1e-3 else f"{value:.2e}")
    return str(value)


def _table(title: str, rows: list[dict], columns: list[tuple[str, str]] | None = None) -> Table:
    if columns is None:
        columns = [(k, k) for k in rows[0]] if rows else []
    columns = [(k, h) for k, h in columns if any(k in r for r in rows)]
    table = Table(title=title, title_justify="left")
    for _, header in columns:
        table.add_column(header, justify="left" if header in ("Source", "Target", "source", "target") else "right",
                         overflow="fold", min_width=6)
    for r in rows:
        table.add_row(*(_cell(r.get(k, "")) for k, _ in columns))
    return table


def _lengths(spec: str) -> list[int]:
    try:
        values = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--long-lengths {spec!r}: expected comma-separated integers such as 1024,2048") from None
    if not values or min(values) < 1:
        raise UsageError(f"--long-lengths {spec!r}: expected positive token counts")
    return values


@report_errors
def thl_check(
    source: list[str] = typer.Option(None, "--source", help="Source tokenizer(s): a name (qwen3, llama3, mistral-sp, "
                                     "mistral-tekken, phi3, gpt2, ...), a folder or a hub id. Default: qwen3, or the "
                                     "source model's own tokenizer."),
    target: list[str] = typer.Option(None, "--target", help="Target tokenizer(s). Default: phi3, or the target "
                                     "model's own tokenizer."),
    cross: bool = typer.Option(False, "--cross", help="Check every source x target combination (else pairs are zipped)."),
    texts_file: str = typer.Option(None, "--texts", help="The texts: a JSONL file of {\"text\": ...} lines, or a "
                                   "data file or folder as task.source reads it (its train split: each row's text, "
                                   "else its prompt and answer or completion). Default: the built-in corpus (prose, "
                                   "LaTeX, code, whitespace, emoji, CJK, mixed scripts)."),
    source_model: str = typer.Option(None, "--source-model", help="Causal LM (folder, hub id or builtin:NAME) whose "
                                     "log-probs are aligned. Default: seeded synthetic log-probs."),
    target_model: str = typer.Option(None, "--target-model", help="Causal LM scoring the target side "
                                     "(Aligned→Target columns; with --source-model also the importance-ratio table)."),
    units: str = typer.Option("auto", "--units", help="Alignment units: auto (CJK per character), word or char."),
    rule: str = typer.Option("exact-copy", "--rule", help="exact-copy (copy per token where spans agree, else spread) "
                             "or paper (always spread the word sum evenly)."),
    long_context: bool = typer.Option(False, "--long-context", help="Add the long-context table (THL vs naive "
                                      "copy/truncate/pad relative MAE)."),
    long_lengths: str = typer.Option("1024,2048,4096,8192", "--long-lengths", help="Target lengths (tokens) for "
                                     "--long-context."),
    long_n: int = typer.Option(8, "--long-n", min=1, help="Texts per length for --long-context."),
    cjk: bool = typer.Option(False, "--cjk", help="Add the CJK table (word-level, char-level, auto-switch units)."),
    all_tables: bool = typer.Option(False, "--all", help="All tables (ratio statistics need both models)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the synthetic log-probs and text sampling."),
    max_word_err: float = typer.Option(1e-4, "--max-word-err", help="Fail (exit 1) when Src→Aligned Max exceeds this "
                                       "(nats per unit)."),
    max_prefix_leak: float = typer.Option(1e-3, "--max-prefix-leak", help="Fail (exit 1) when Prefix Leak Max exceeds this."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Check THL's per-word mass conservation between tokenizers and reproduce the paper's THL diagnostics."""
    from mutualrl.thl.check_verdict import pair_verdict, ratio_verdict
    from mutualrl.thl.corpus import builtin_corpus

    _check_options(units, rule, max_word_err, max_prefix_leak, long_n)
    texts = read_texts(texts_file) if texts_file else builtin_corpus()
    pairs, both_models = _policy_pairs(source, target, cross, source_model, target_model)
    result = _diagnostics(pairs, texts, seed=seed, units=units, rule=rule, ratios=both_models, cjk=cjk or all_tables,
                          long_lengths=long_lengths if long_context or all_tables else None, long_n=long_n)
    failures = _failures(result["pairs"], max_word_err, max_prefix_leak)
    result["verdict"] = [*(pair_verdict(row, max_word_err, max_prefix_leak) for row in result["pairs"]),
                         *ratio_verdict(result.get("ratios", []))]
    _print_result(result, json_output)
    if failures:
        from mutualrl.cli.common import err_console

        err_console.print("[bold red]THL conservation check failed:[/]\n  " + "\n  ".join(failures), highlight=False)
        raise typer.Exit(1)


TEXT_FIELDS = ("completion", "answer", "solution", "response")
"""Row fields after the prompt that make a text of a data row without a ``text`` field (the first one present)."""


def read_texts(path: str) -> list[str]:
    """``--texts``: a JSONL file of ``{"text": ...}`` lines, else the train split of a data file or folder as
    ``task.source`` reads it, each row's ``text``, or its prompt (a chat's contents joined) then its answer."""
    from mutualrl.errors import DataError
    from mutualrl.tasks.sources import read_local
    from mutualrl.thl.corpus import load_texts

    where = Path(path).expanduser()
    if not where.exists():
        raise DataError(f"texts file {where} does not exist")
    # a texts file: each line must have its text (a FIFO is no file: first_line would block on it)
    if where.suffix == ".jsonl" and where.is_file() and '"text"' in first_line(where):
        return load_texts(where)
    data = read_local(where, "train")
    texts = []
    for index, row in enumerate(data.rows):
        text = row_text(row)
        if text is None:
            raise DataError(f"--texts {data.origin}: row {index} has no text, prompt or {', '.join(TEXT_FIELDS)}")
        texts.append(text)
    return texts


def first_line(path: Path) -> str:
    """The first line of ``path`` that is not blank ("" for none)."""
    with path.open(encoding="utf-8", errors="replace") as lines:
        return next((line for line in lines if line.strip()), "")


def row_text(row: Any) -> str | None:
    """A data row as one text: its ``text``, else its prompt and the first of :data:`TEXT_FIELDS` it has; None for a
    row with none of them."""
    if not isinstance(row, dict):
        return None
    if isinstance(row.get("text"), str):
        return row["text"]
    prompt = row.get("prompt")
    if isinstance(prompt, list):  # a chat: its messages' contents
        prompt = "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict))
    after = next((row[f] for f in TEXT_FIELDS if isinstance(row.get(f), (str, int, float))
                  and not isinstance(row.get(f), bool)), None)
    parts = [str(part) for part in (prompt, after) if isinstance(part, (str, int, float))]
    return " ".join(part for part in parts if part) if parts else None


def _check_options(units: str, rule: str, max_word_err: float, max_prefix_leak: float, long_n: int) -> None:
    from mutualrl.thl.align import ALIGN_RULES
    from mutualrl.thl.units import UNIT_MODES

    if units not in UNIT_MODES:
        raise UsageError(f"--units {units!r}: expected one of {', '.join(UNIT_MODES)}")
    if rule not in ALIGN_RULES:
        raise UsageError(f"--rule {rule!r}: expected one of {', '.join(ALIGN_RULES)}")
    for flag, value in (("--max-word-err", max_word_err), ("--max-prefix-leak", max_prefix_leak)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{flag} must be a non-negative number, got {value}")
    if long_n < 1:
        raise UsageError(f"--long-n must be at least 1, got {long_n}")


def _policy_pairs(
    source: list[str] | None, target: list[str] | None, cross: bool, source_model: str | None, target_model: str | None
) -> tuple[list[tuple[Policy, Policy]], bool]:
    """The (source, target) policies to check, and whether both sides have a model."""
    sources = list(source) if source else ([source_model] if source_model else ["qwen3"])
    targets = list(target) if target else ([target_model] if target_model else ["phi3"])
    models = {"source": _load(source_model) if source_model else None,
              "target": _load(target_model) if target_model else None}
    pairs = [(_policy(s, "source", source_model, models["source"]),
              _policy(t, "target", target_model, models["target"])) for s, t in _pairs(sources, targets, cross)]
    return pairs, models["source"] is not None and models["target"] is not None


def _load(model: str) -> Any:
    """A model on the CPU, said on standard error (the tables stay on standard output, free of loading bars)."""
    from mutualrl.launch.evaluate import quiet_transformers
    from mutualrl.pools.loading import load_model

    quiet_transformers()
    Console(stderr=True, soft_wrap=True).print(f"thl-check: loading {model} on cpu ...", highlight=False,
                                               markup=False)
    return load_model(model, dtype="float32", device="cpu")


def _policy(name: str, side: str, model_name: str | None, model: Any) -> Policy:
    """Tokenizer ``name`` (the model's own when it names the model) with the side's model, if any."""
    from mutualrl.assets.tokenizers import load_tokenizer
    from mutualrl.pools.loading import load_tokenizer_for
    from mutualrl.thl import check

    if model_name is not None and name == model_name:
        tok = load_tokenizer_for(model_name)
    else:
        tok = load_tokenizer(name)
    if model is not None:
        n_embed = model.get_input_embeddings().num_embeddings
        if len(tok) > n_embed:
            raise UsageError(
                f"--{side} {name!r} has {len(tok)} tokens but --{side}-model {model_name!r} embeds only "
                f"{n_embed}: give the model's own tokenizer (or leave --{side} out)"
            )
    return check.Policy(name=name, tokenizer=tok, model=model)


def _diagnostics(pairs: list[tuple[Policy, Policy]], texts: list[str], *, seed: int, units: str, rule: str,
                 ratios: bool, cjk: bool, long_lengths: str | None, long_n: int) -> dict[str, Any]:
    """The conservation table, then the optional long-context, CJK and importance-ratio tables."""
    from mutualrl.thl import check

    def say(s: Policy, t: Policy, what: str) -> None:  # a model's scoring takes a while on a CPU: said, on stderr
        if s.model is not None or t.model is not None:
            Console(stderr=True, soft_wrap=True).print(f"thl-check: {s.name} -> {t.name}: {what} ...",
                                                       highlight=False, markup=False)

    rows = []
    for index, (s, t) in enumerate(pairs, start=1):
        say(s, t, f"pair {index}/{len(pairs)}: scoring {len(texts)} texts")
        rows.append(check.conservation_row(s, t, texts, seed=seed, units=units, rule=rule))
    result: dict[str, Any] = {"pairs": rows}
    if long_lengths is not None:
        lengths = _lengths(long_lengths)
        result["long_context"] = [r for s, t in pairs
                                  for r in check.long_context_table(s, t, texts, lengths, long_n, seed=seed, units=units)]
    if cjk:
        result["cjk"] = [r for s, t in pairs for r in check.cjk_table(s, t, texts, seed=seed)]
    if ratios:
        result["ratios"] = []
        for s, t in pairs:
            say(s, t, "importance ratios against a shuffled prompt and a broken alignment")
            result["ratios"] += check.ratio_table(s, t, texts, seed=seed)
    return result


def _failures(rows: list[dict], max_word_err: float, max_prefix_leak: float) -> list[str]:
    """One line per pair over a threshold, naming the measures that are."""
    return [
        f"{r['source']} -> {r['target']}: " + ", ".join(
            msg for ok, msg in (
                (r["src_to_aligned_max"] <= max_word_err, f"src_to_aligned_max {r['src_to_aligned_max']:.3g} > {max_word_err:g}"),
                (r["prefix_leak_max"] <= max_prefix_leak, f"prefix_leak_max {r['prefix_leak_max']:.3g} > {max_prefix_leak:g}"),
            ) if not ok)
        for r in rows
        if r["src_to_aligned_max"] > max_word_err or r["prefix_leak_max"] > max_prefix_leak
    ]


def _print_result(result: dict[str, Any], json_output: bool) -> None:
    if json_output:
        typer.echo(json.dumps(result, indent=2))
    else:
        console.print(_table("THL conservation (per-unit mass; paper Tab. thl-wikitext)", result["pairs"], _PAIR_COLUMNS))
        for key, title in (("long_context", "Long-context relative MAE (%): THL vs naive copy/truncate/pad"),
                           ("cjk", "Relative MAE (%) by unit mode (words for Western text, characters for CJK)"),
                           ("ratios", "Importance ratios exp(l_target - denominator)")):
            if key in result:
                console.print(_table(title, result[key]))
        from mutualrl.thl.check_verdict import COUNTS

        console.print(COUNTS, highlight=False, soft_wrap=True, markup=False)
        console.print("verdict:", highlight=False, markup=False)
        for line in result["verdict"]:
            console.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
