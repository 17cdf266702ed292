"""The SEE on a shared filesystem with attribute caching: a folder listing can miss a new round for up to a minute
(NFS ``acdirmax``, 60 s by default), an open of a name cannot (close-to-open consistency). The barrier opens the
manifests it can name, so it sees a peer's round at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from see_synthetic import synthetic_batch

from mutualrl.see import files, liveness, shards
from mutualrl.see.exchange import ExperienceExchange


class StaleListing:
    """``os`` as an NFS client with attribute caching shows a folder: for 60 s from :meth:`freeze` a listing
    (``scandir``) shows only what existed then, and a folder made since is not found by it; opening a file or a
    folder by its name is current (everything else is the real ``os``)."""

    STALE_S = 60.0

    def __init__(self, root: Path):
        self.root, self.frozen_at, self.known = root, 0.0, set()

    def freeze(self) -> None:
        self.frozen_at = time.monotonic()
        self.known = {str(self.root)} | {os.path.join(folder, name) for folder, dirs, names in os.walk(self.root)
                                         for name in (*dirs, *names)}

    def stale(self, path: str) -> bool:
        return time.monotonic() - self.frozen_at < self.STALE_S and path not in self.known

    def scandir(self, path):
        path = os.fspath(path)
        if self.stale(path):
            raise FileNotFoundError(2, "No such file or directory (cached)", path)
        return iter([entry for entry in os.scandir(path) if not self.stale(entry.path)])

    def __getattr__(self, name):
        return getattr(os, name)


@pytest.fixture
def stale_listing(tmp_path, monkeypatch):
    fake = StaleListing(tmp_path / "see")
    for module in (shards, liveness):
        monkeypatch.setattr(module, "os", fake)
    return fake


def pair(root: Path) -> tuple[ExperienceExchange, ExperienceExchange]:
    a, b = (ExperienceExchange(root, "run", name, policies=["a", "b"], barrier_timeout_s=5.0, poll_interval_s=0.01)
            for name in ("a", "b"))
    return a, b


def test_the_fake_listing_hides_a_new_round_for_a_minute(tmp_path, stale_listing):
    a, b = pair(tmp_path / "see")
    stale_listing.freeze()
    b.publish(0, synthetic_batch(2, 2, seed=2))
    folder = files.policy_dir(a.root, 0, "b")
    with pytest.raises(FileNotFoundError):
        stale_listing.scandir(folder)
    assert files.manifest_path(a.root, 0, "b", 0, 1).is_file()  # opened by name: there


def test_the_barrier_sees_a_new_round_at_once_when_the_listing_is_stale(tmp_path, stale_listing):
    """Failed before: the barrier trusted the listing and timed out after 5 s (a minute on NFS by default)."""
    a, b = pair(tmp_path / "see")
    stale_listing.freeze()
    a.publish(0, synthetic_batch(2, 2, seed=1))
    b.publish(0, synthetic_batch(2, 2, seed=2))
    started = time.monotonic()
    found = a.wait_for(0)
    assert time.monotonic() - started < 2.0
    assert [s.policy for s in found["b"]] == ["b"] and a.read(0, "b").num_rows == 4
    stale_listing.freeze()  # the next round: its world size is now known from this one
    b.publish(1, synthetic_batch(2, 2, seed=3))
    assert a.wait_for(1, ["b"])["b"][0].step == 1


def test_the_scan_opens_each_folder_on_its_way_first(tmp_path, monkeypatch):
    """On NFS opening a folder asks the server for its attributes (close-to-open), which drops a cached 'missing'
    for a folder made since: root, step folder, policy folder, in that order, before the listing."""
    a, b = pair(tmp_path / "see")
    b.publish(0, synthetic_batch(2, 2, seed=2))
    opened = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        if flags & os.O_DIRECTORY:
            opened.append(Path(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", spy)
    a.shards(0, "b")
    assert opened[:3] == [a.root, files.step_dir(a.root, 0), files.policy_dir(a.root, 0, "b")]
