"""Activation bytes per token of each paper model's decoder layers, forward + backward, measured on the CPU (or a
lent GPU: ``--device cuda``).

For each shape in ``mutualrl.launch.plan.model_shapes.KNOWN_SHAPES`` (one per distinct shape) this builds the
model's ``transformers`` base model from a config made here from the shape entry (no hub download), randomly
initialised, with a few layers instead of the model's count (the widths are the model's), in bf16 where the CPU
has it, SDPA attention, a padding mask (one row left-padded, so SDPA is called with a mask as under TRL's padded
batches), and runs one forward and backward of ``rows`` x ``seq`` tokens, with HF's non-reentrant gradient
checkpointing and without it.

How memory is counted: a ``TorchDispatchMode`` sees every tensor an ATen op returns and keeps the bytes of each
distinct storage alive (a weak reference to the storage drops them when it is freed); the peak of that sum over
forward and backward is the peak a caching allocator would have to serve with no fragmentation. Chosen over
``torch.profiler``'s memory timeline (its CPU peak needs the whole timeline exported and is slow on 2 cores) and
over counting saved tensors with ``saved_tensors_hooks`` (that misses the recompute and backward temporaries, which
are most of the checkpointed peak). The weights and their gradients exist before the measurement (gradients
zeroed, so the backward accumulates into them in place) and are not counted. Each setting runs at 4 and 8 rows and
1 and 3 layers; the per-token figures are the slopes, so constant costs (one weight-sized temporary) drop out:

- ``kept_per_layer``: bytes per token each further layer adds (with checkpointing: the layer input it keeps);
- ``rest``: bytes per token of the peak besides that (the recomputed layer, its backward's temporaries, the
  hidden-state gradients in flight, the final norm);
- ``per_token_at_model_layers`` = ``layers x kept_per_layer + rest`` at the model's real layer count.

Two biases of the slopes, both smaller at longer rows: the peak's moment can move between the row counts (at 1024
tokens it can fall where a weight-sized gradient is alive, at 2048 where one more intermediate-width gradient is),
so at ``--seq 256`` ``rest`` mixes two moments and reads low by up to one intermediate-width tensor; and the padding
mask is ``[rows, 1, seq, seq]`` (each layer saves its own bf16 copy), bytes per token that grow with ``seq``. Hence
a second record at ``--seq 512`` (``activation-memory-seq512.json``).

::

    PYTHONPATH=src nice python benchmarks/activation_memory.py --out benchmarks/results/activation-memory.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from mutualrl.launch.plan.model_shapes import ModelShape, model_shape  # noqa: E402

MODELS = {  # one model of each distinct shape; the architecture transformers builds it with
    "Qwen/Qwen2.5-1.5B-Instruct": "qwen2",
    "Qwen/Qwen3-1.7B-Base": "qwen3",
    "Qwen/Qwen3-4B-Base": "qwen3",
    "meta-llama/Llama-3.2-3B-Instruct": "llama",
    "microsoft/Phi-4-mini-instruct": "phi3",
    "ministral/Ministral-3b-instruct": "mistral",
}
LAYER_COUNTS = (1, 3)
ROW_COUNTS = (4, 8)


class LiveBytes(TorchDispatchMode):
    """The bytes of the distinct storages ATen ops returned that are still alive, and their peak."""

    def __init__(self, preexisting: set[int]) -> None:
        super().__init__()
        self.preexisting = preexisting
        """Storages alive before (weights, gradients): views of them (a transposed weight) are not new bytes."""
        self.live: dict[int, tuple[int, Any]] = {}
        self.current = 0
        self.peak = 0
        self.ops: set[str] = set()

    def _freed(self, key: int) -> None:
        size, _ = self.live.pop(key, (0, None))
        self.current -= size

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func.overloadpacket))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in self.live or key in self.preexisting or storage.nbytes() == 0:
                continue
            self.live[key] = (storage.nbytes(), weakref.ref(storage, lambda _, k=key: self._freed(k)))
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        return out


def build_config(shape: ModelShape, architecture: str, layers: int) -> Any:
    """A transformers config of ``shape``'s widths with ``layers`` layers and a small vocabulary (not measured)."""
    import transformers

    fields = dict(hidden_size=shape.hidden, intermediate_size=shape.intermediate, num_hidden_layers=layers,
                  num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads, vocab_size=256,
                  max_position_embeddings=4096, attn_implementation="sdpa", pad_token_id=0)
    if architecture == "qwen2":
        return transformers.Qwen2Config(**fields)
    if architecture == "qwen3":
        return transformers.Qwen3Config(head_dim=shape.head_dim, **fields)
    if architecture == "llama":
        return transformers.LlamaConfig(head_dim=shape.head_dim, **fields)
    if architecture == "phi3":
        return transformers.Phi3Config(partial_rotary_factor=0.75, **fields)
    if architecture == "mistral":  # Ministral-3b-instruct's config.json: a 4096-token sliding window
        return transformers.MistralConfig(head_dim=shape.head_dim, sliding_window=4096, **fields)
    raise ValueError(f"unknown architecture {architecture!r}")


def peak_bytes(shape: ModelShape, architecture: str, layers: int, rows: int, seq: int, dtype: torch.dtype,
               checkpointing: bool, device: str = "cpu") -> tuple[int, set[str]]:
    """Peak live activation bytes of one forward + backward of ``rows`` x ``seq`` tokens."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(build_config(shape, architecture, layers), dtype=dtype).to(device)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for parameter in model.parameters():
        parameter.grad = torch.zeros_like(parameter)  # the parameter's shape: accumulated into in place
    mask = torch.ones(rows, seq, dtype=torch.long, device=device)  # [rows, seq]
    mask[0, : seq // 4] = 0  # one left-padded row: SDPA gets a mask, not is_causal
    preexisting = {t.untyped_storage().data_ptr() for p in model.parameters() for t in (p, p.grad)}
    with LiveBytes(preexisting) as tracker:
        embeds = torch.randn(rows, seq, shape.hidden, dtype=dtype, device=device,
                             requires_grad=True)  # [rows, seq, hidden]
        hidden = model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state  # [rows, seq, hidden]
        hidden.backward(torch.randn_like(hidden))  # [rows, seq, hidden]: the head's gradient
        del hidden, embeds
    return tracker.peak, tracker.ops


def measure(model: str, architecture: str, seq: int, dtype: torch.dtype, device: str = "cpu") -> dict[str, Any]:
    shape = model_shape(model)
    assert shape is not None, model
    result: dict[str, Any] = {"architecture": architecture, "layers": shape.layers}
    for checkpointing in (True, False):
        peaks: dict[tuple[int, int], int] = {}
        ops: set[str] = set()
        for layers in LAYER_COUNTS:
            for rows in ROW_COUNTS:
                peaks[layers, rows], seen = peak_bytes(shape, architecture, layers, rows, seq, dtype,
                                                       checkpointing, device)
                ops |= seen
        token_gap = (ROW_COUNTS[1] - ROW_COUNTS[0]) * seq
        layer_gap = LAYER_COUNTS[1] - LAYER_COUNTS[0]
        per_token = {layers: (peaks[layers, ROW_COUNTS[1]] - peaks[layers, ROW_COUNTS[0]]) / token_gap
                     for layers in LAYER_COUNTS}
        kept = (per_token[LAYER_COUNTS[1]] - per_token[LAYER_COUNTS[0]]) / layer_gap
        rest = per_token[LAYER_COUNTS[0]] - LAYER_COUNTS[0] * kept
        result["checkpointing" if checkpointing else "no_checkpointing"] = {
            "kept_per_layer": round(kept), "rest": round(rest),
            "per_token_at_model_layers": round(shape.layers * kept + rest),
            "peaks": {f"{layers} layers x {rows} rows": peak for (layers, rows), peak in peaks.items()},
            "attention_ops": sorted(op for op in ops if "attention" in op),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON here (default: print only)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per row")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated models of MODELS")
    parser.add_argument("--device", default="cpu",
                        help="cpu, or cuda on a lent GPU (bf16 there; SDPA picks its CUDA kernel)")
    args = parser.parse_args()
    bf16 = torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    dtype = torch.bfloat16 if bf16 or args.device.startswith("cuda") else torch.float32
    results = {}
    for model in args.models.split(","):
        started = time.monotonic()
        results[model] = measure(model, MODELS[model], args.seq, dtype, args.device)
        results[model]["seconds"] = round(time.monotonic() - started, 1)
        print(model, json.dumps(results[model]), flush=True)
    import transformers

    record = {
        "command": "PYTHONPATH=src nice python benchmarks/activation_memory.py " + " ".join(sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "machine": (torch.cuda.get_device_name(0) + ", " if args.device.startswith("cuda") else "")
                   + f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
                   f"{platform.system()} {platform.release()}",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "dtype": str(dtype).removeprefix("torch."), "device": args.device,
        "attention": "sdpa, one left-padded row (a mask)",
        "seq": args.seq, "rows": list(ROW_COUNTS), "layer_counts": list(LAYER_COUNTS),
        "method": "live ATen storages (TorchDispatchMode), peak over forward + backward; slopes over rows and layers",
        "models": results,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
