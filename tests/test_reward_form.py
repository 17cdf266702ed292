"""A reward function gets prompts and completions in the form TRL's ``GRPOTrainer`` gives it for the dataset,
whatever each policy's chat template (issue 49 item 2): per policy kind (under its chat template or plain text)
and per dataset kind (conversational or text prompts)."""

from __future__ import annotations

import asyncio

import pytest
from trl.data_utils import is_conversational
from trl.rewards import accuracy_reward, think_format_reward

from mutualrl.evaluation.generate import score_with_funcs
from mutualrl.tasks.reward_form import in_dataset_form, reads_messages
from mutualrl.tasks.reward_funcs import RewardSpec
from mutualrl.tasks.user_dataset import UserDatasetTask
from mutualrl.training.data import to_trl_rows

MESSAGES = [{"role": "system", "content": "Answer in a box."}, {"role": "user", "content": "2+3="}]


def examples(conversational: bool):
    rows = [{"prompt": MESSAGES if conversational else "2+3=", "solution": "5"},
            {"prompt": [{"role": "user", "content": "1+1="}] if conversational else "1+1=", "solution": "2"}]
    return [UserDatasetTask().make_example(row, i, "train", "t.jsonl") for i, row in enumerate(rows)]


def trl_call(exs, chat: bool, texts: list[str]) -> dict:
    """What a policy's TRL passes its reward functions: the policy's prompts (``to_trl_rows``) and the
    completions as GRPOTrainer decodes them for those prompts (one assistant message for chat prompts)."""
    rows = to_trl_rows(exs, chat)
    conversational = is_conversational(rows[0])
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else list(texts)
    columns = {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}
    return {"prompts": [row["prompt"] for row in rows], "completions": completions,
            "completion_ids": [[1, 2]] * len(texts), **columns}


@pytest.mark.parametrize("chat", [True, False], ids=["chat-policy", "plain-policy"])
@pytest.mark.parametrize("conversational", [True, False], ids=["chat-prompts", "text-prompts"])
def test_a_user_function_gets_trls_form_for_the_dataset_from_every_policy_kind(conversational, chat):
    exs = examples(conversational)
    seen = {}

    def mine(prompts, completions, completion_ids, solution, **kwargs):
        seen.update(prompts=prompts, completions=completions, solution=solution)
        return [0.0] * len(completions)

    [wrapped] = in_dataset_form([mine], exs)
    assert wrapped.__name__ == "mine"  # TRL logs rewards/mine/mean
    wrapped(**trl_call(exs, chat, ["\\boxed{5}", "3"]))
    # GRPOTrainer on the dataset itself: conversational prompts -> assistant messages, text prompts -> strings
    dataset_rows = [{"prompt": ex.meta.get("messages") or ex.prompt} for ex in exs]
    if is_conversational(dataset_rows[0]):
        expected = [[{"role": "assistant", "content": "\\boxed{5}"}], [{"role": "assistant", "content": "3"}]]
    else:
        expected = ["\\boxed{5}", "3"]
    assert seen == {"prompts": [row["prompt"] for row in dataset_rows], "completions": expected,
                    "solution": ["5", "2"]}


@pytest.mark.parametrize("chat", [True, False], ids=["chat-policy", "plain-policy"])
@pytest.mark.parametrize("conversational", [True, False], ids=["chat-prompts", "text-prompts"])
def test_trls_own_rewards_read_every_policys_completions(conversational, chat):
    """accuracy_reward and think_format_reward read ``completion[0]["content"]``: they get messages from every
    policy, on text prompts too (where TRL's strings would fail them with 'string indices must be integers')."""
    exs = examples(conversational)
    acc, think = in_dataset_form([accuracy_reward, think_format_reward], exs)
    call = trl_call(exs, chat, ["so \\boxed{5}", "<think>hm</think> \\boxed{3}"])
    assert acc(**call) == [1.0, 0.0]
    assert think(**call) == [0.0, 1.0]


def test_only_a_function_annotated_for_messages_is_given_them_on_text_prompts():
    def plain(prompts, completions, **kwargs):
        return []

    def typed(completions: list[list[dict[str, str]]], **kwargs):
        return []

    assert reads_messages(accuracy_reward) and reads_messages(think_format_reward) and reads_messages(typed)
    assert not reads_messages(plain) and not reads_messages(len)


def test_an_async_function_stays_async_for_trl():
    async def later(prompts, completions, **kwargs):
        return [float(len(c)) for c in completions]

    [wrapped] = in_dataset_form([later], examples(False))
    assert asyncio.iscoroutinefunction(wrapped.__call__)
    call = trl_call(examples(False), True, ["ab", "c"])
    assert asyncio.run(wrapped(**call)) == [2.0, 1.0]


@pytest.mark.parametrize("chat", [True, False], ids=["chat-policy", "plain-policy"])
def test_held_out_scoring_gives_the_same_form_as_training(chat, tmp_path, monkeypatch):
    (tmp_path / "form_probe.py").write_text(
        "SEEN = []\n"
        "def probe(prompts, completions, **kwargs):\n"
        "    SEEN.append((prompts, completions))\n"
        "    return [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import form_probe

    exs = examples(True)
    results = score_with_funcs(RewardSpec(task="dataset", funcs=("form_probe.probe",)), exs, ["5", "2"], None, chat)
    assert [r.score for r in results] == [1.0, 1.0]
    prompts, completions = form_probe.SEEN[-1]
    assert prompts == [MESSAGES, [{"role": "user", "content": "1+1="}]]
    assert completions == [[{"role": "assistant", "content": "5"}], [{"role": "assistant", "content": "2"}]]
