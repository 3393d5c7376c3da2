"""The history ``run`` keeps for ``statistic: forecast`` with ``source: samples``, in
``<state dir>/<cluster>/load-history.bin`` (``reconciler.core.load_history``).

One file: a first line naming the format, a line of JSON (the cluster, the bucket's width in
seconds, the last bucket, the buckets per VM, the VMs and their UUIDs), then every VM's
buckets as little-endian half-precision floats, row after row (2 bytes a bucket: about 4 MB a
week of 1,000 VMs).
Replaced atomically when a bucket completes (every 5 minutes, or a 48th of a shorter
seasonal period), so a restart of ``run``, or a
crash mid-write, keeps the history. A file that cannot be read as such (torn before this,
edited, another format) is a warning naming it and is treated as absent: the history starts
again. Bounded: a row per VM sampled within the history, of at most 28 days.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from reconciler.adapters.files.atomic import write_atomically, write_hint
from reconciler.adapters.files.status import default_state_dir
from reconciler.core.load_history import BUCKET, DTYPE, LoadHistory
from reconciler.errors import TerminalError

log = logging.getLogger(__name__)

FILE_NAME = "load-history.bin"
MAGIC = b"reconciler load history 1\n"
ON_DISK = np.dtype("<f2")
MAX_SLOTS = round(28 * 86400 / BUCKET)
"""Buckets per VM at most: 28 days at 5m (``forecast.MAX_POINTS``)."""
MAX_HEADER = 64 * 1024 * 1024


class FileLoadHistory:
    """The history of one cluster in its state directory."""

    def __init__(self, cluster: str, state_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.path = (state_dir or default_state_dir()) / cluster / FILE_NAME

    def load(self) -> LoadHistory | None:
        """The history kept; None when there is none or it cannot be read (a warning)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TerminalError(
                f"cannot read the load history {self.path}: {err.strerror or err}",
                hint="give the reconciler's user read access to its state directory",
            ) from err
        try:
            return self._parsed(data)
        except ValueError as err:
            log.warning(
                "load history file %s is %s; treated as absent: the forecast's history starts "
                "again (remove the file to silence this)",
                self.path,
                err,
            )
            return None

    def _parsed(self, data: bytes) -> LoadHistory:
        if not data.startswith(MAGIC):
            raise ValueError("not a load history (its first line is not the format's)")
        rest = memoryview(data)[len(MAGIC) :]
        newline = bytes(rest[:MAX_HEADER]).find(b"\n")
        if newline < 0:
            raise ValueError("torn: its header has no end")
        try:
            head = json.loads(bytes(rest[:newline]))
            cluster, end, slots = str(head["cluster"]), int(head["end"]), int(head["slots"])
            vms = [(str(n), str(u)) for n, u in head["vms"]]
            bucket = float(head.get("bucket", BUCKET))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a load history header ({err})") from None
        if not 0 < bucket <= 86400:
            raise ValueError(f"out of bounds (buckets of {bucket:g} seconds)")
        if cluster != self.cluster:
            raise ValueError(f"the history of cluster {cluster!r}, not {self.cluster!r}")
        if not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"out of bounds ({slots} buckets per VM, at most {MAX_SLOTS})")
        body = rest[newline + 1 :]
        want = len(vms) * slots * ON_DISK.itemsize
        if len(body) != want:
            raise ValueError(f"torn: {len(body)} bytes of buckets where {want} belong")
        values = np.frombuffer(body, dtype=ON_DISK).astype(DTYPE).reshape(len(vms), slots)
        return LoadHistory(
            cluster, end, tuple(n for n, _ in vms), tuple(u for _, u in vms), values, bucket
        )

    def save(self, history: LoadHistory) -> None:
        """Replace the file, atomically; its folder is made when missing."""
        head = {
            "cluster": history.cluster,
            # 300, not 300.0: a whole number of seconds is written as one
            "bucket": int(history.bucket) if history.bucket.is_integer() else history.bucket,
            "end": history.end,
            "slots": history.slots,
            "vms": [[n, u] for n, u in zip(history.names, history.uuids, strict=True)],
        }
        data = b"".join(
            (
                MAGIC,
                json.dumps(head, separators=(",", ":")).encode("utf-8"),
                b"\n",
                np.ascontiguousarray(history.values, dtype=ON_DISK).tobytes(),
            )
        )
        try:
            write_atomically(self.path, data, mode=0o644, make_parents=True)
        except OSError as err:
            raise TerminalError(
                f"cannot write the load history in {self.path.parent}: {err.strerror or err}",
                hint=write_hint(err),
            ) from err
