"""Strict YAML for recipes, ``--set`` values and a run's ``config.yaml``: one error naming the key, never a hang.

PyYAML's safe loader keeps the last of two equal keys without a word (a recipe that sets
``learning_rate`` twice trains with one of them, silently), and expands aliases without bound:
nine lines of anchors make a mapping of 10**9 entries (an "alias bomb") that every later step
(merging, type checks, ``to_plain``, writing ``config.yaml``) walks for minutes and gigabytes,
wherever the bomb sits, free-form mappings such as ``grpo.model_init_kwargs`` included. So
:func:`load_yaml` refuses, before anything is built:

- a key given twice in one mapping (keys merged in with ``<<`` may be overridden, as YAML says);
- a document whose aliases would expand to more than :data:`MAX_NODES` nodes, or refer to themselves;
- nesting too deep for Python to walk.

It also reads ``1e-6`` as the number it is: YAML 1.1 (PyYAML) wants a dot (``1.0e-6``) and would hand
the rest of mutualrl the text ``"1e-6"``; and ``1:20`` as the text it is, not YAML 1.1's base-60 number 80.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from mutualrl.config.typed import ConfigError

MAX_NODES = 100_000
"""Nodes a document may hold once its aliases are expanded (the largest shipped recipe holds a few hundred)."""
MERGE_TAG = "tag:yaml.org,2002:merge"
EXPONENT_WITHOUT_DOT = re.compile(r"^[-+]?(?:[0-9]+|[0-9]*\.[0-9]+)[eE][-+]?[0-9]+$")
"""``1e-6``, ``2E+3``: numbers in YAML 1.2 and to a reader, text to PyYAML's YAML 1.1 float rule (it wants a dot)."""


class _StrictLoader(yaml.SafeLoader):
    """The safe loader, refusing duplicate keys and documents that expand past :data:`MAX_NODES`."""

    source = "<yaml>"

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise ConfigError(self.source, str(key), f"given twice in one mapping (line {line}); keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}
        if expanded_size(node, sizes, set(), self.source) > MAX_NODES:
            raise ConfigError(self.source, oversized_key(node, sizes),
                              f"its aliases expand to more than {MAX_NODES} values (an alias bomb?); write it out")
        return self.construct_document(node)


_StrictLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_WITHOUT_DOT, list("-+0123456789."))


def _number_or_text(construct: Any) -> Any:
    """YAML 1.1's base-60 numbers (``1:20`` is 80, ``1:20.5`` 80.5) stay the text they read as (YAML 1.2 has no
    such numbers, and no one means ``grpo.seed=1:20`` as 80): a number field then names the value it got."""

    def constructor(loader: yaml.SafeLoader, node: Node) -> Any:
        if isinstance(node, ScalarNode) and ":" in str(node.value):
            return str(node.value)
        return construct(loader, node)

    return constructor


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _number_or_text(yaml.SafeLoader.construct_yaml_int))
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _number_or_text(yaml.SafeLoader.construct_yaml_float))


def children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def expanded_size(node: Node, sizes: dict[int, int], active: set[int], source: str) -> int:
    """How many nodes ``node`` holds with every alias expanded (each shared node counted once, its size remembered:
    linear in the document); stops counting past :data:`MAX_NODES`."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in active:
        raise ConfigError(source, "", f"line {node.start_mark.line + 1}: an alias refers to its own "
                          "anchor (a recursive structure); write it out")
    active.add(key)
    total = 1
    for child in children(node):
        total += expanded_size(child, sizes, active, source)
        if total > MAX_NODES:
            break
    active.discard(key)
    sizes[key] = total
    return total


def oversized_key(node: Node, sizes: dict[int, int]) -> str:
    """The dotted key of the deepest mapping entry whose value alone expands past the bound (where the bomb is)."""
    path: list[str] = []
    while isinstance(node, MappingNode):
        big = [(k, v) for k, v in node.value if sizes.get(id(v), 0) > MAX_NODES and isinstance(k, ScalarNode)]
        if not big:
            break
        path.append(str(big[0][0].value))
        node = big[0][1]
    return ".".join(path)


def load_yaml(text: str, source: str) -> Any:
    """``text`` as YAML, strictly (module docstring); every problem is a :class:`ConfigError` naming ``source`` and,
    where there is one, the key."""
    loader = _StrictLoader(text)
    loader.source = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise ConfigError(source, "", f"not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(source, "", "nested too deeply to read") from None
    finally:
        loader.dispose()
