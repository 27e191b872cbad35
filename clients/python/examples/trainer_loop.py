#!/usr/bin/env python3
"""A trainer loop over the turnstile gateway (standard library only).

    submit a dataset -> consume the feed -> "train" (accumulate rewards and
    token counts) -> acknowledge -> request a checkpoint every K results ->
    continue, until the set is done.

It keeps its own small state file (the receipts it trained on, the feed
cursor, the acknowledgement in flight, its running totals), written
atomically after every batch, so a trainer killed at any point and started
again with the same --state continues where it was: a result it trained on
but had not acknowledged yet is acknowledged, not trained on twice, and one
it never saw comes again because the gateway holds it until acknowledged.

When the gateway's watchdog reports the set stalled (no progress within its
window: the model endpoint is down, every collector died), the loop stops at
once with the reason and exit status 3, instead of polling an empty feed.

    python3 -m venv .venv && .venv/bin/python -m pip install --no-index ./clients/python
    .venv/bin/python clients/python/examples/trainer_loop.py --gateway http://127.0.0.1:8088 \\
        --set d1 --dataset rows.jsonl --repeats 4 --state d1.trainer.json \\
        --checkpoint-every 32 --participant http://127.0.0.1:8091

The token is read from $TURNSTILE_GATEWAY_TOKEN (or --token); checkpoints
need the gateway's operator token, read from $TURNSTILE_GATEWAY_OPERATOR_TOKEN
(or --operator-token). The summary is
one JSON document on standard output; progress goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from turnstile import (  # the installed client (see above), not the source beside examples/
    APIError,
    Client,
    Conflict,
    DatasetRow,
    ExportLine,
    FeedResponse,
    Receipt,
    RetryPolicy,
    SetStalled,
    TransportError,
    TurnstileError,
    Unavailable,
    new_request_id,
    receipt_of,
)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_STALLED = 0, 1, 2, 3
STATE_VERSION = 1


@dataclass
class Checkpoint:
    """A checkpoint the trainer asked for after `at` results."""

    id: str
    request_id: str
    at: int
    status: str = "requested"  # requested, running, completed, failed
    error: str = ""


@dataclass
class State:
    """Everything the trainer must remember across a restart."""

    set: str
    version: int = STATE_VERSION
    submit_request_id: str = ""
    submitted: bool = False
    cursor: Optional[str] = None
    # rollout id -> sha256 of every result trained on, and how often the
    # feed handed each result over (1 unless one was delivered twice).
    trained: Dict[str, str] = field(default_factory=dict)
    deliveries: Dict[str, int] = field(default_factory=dict)
    failed: Dict[str, str] = field(default_factory=dict)
    # The acknowledgement in flight: sent again, with its request id, after
    # a restart.
    pending_ack: Optional[Dict[str, Any]] = None
    acknowledged: int = 0
    # "Training": running totals over the results trained on.
    reward_sum: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generated_token_ids: int = 0
    checkpoints: List[Checkpoint] = field(default_factory=list)
    next_checkpoint_at: int = 0
    swept: int = 0  # results found by the final sweep that the cursor had passed
    redelivered: int = 0  # items delivered again (already trained on)

    @classmethod
    def load(cls, path: str, set_name: str) -> "State":
        if not os.path.exists(path):
            return cls(set=set_name)
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"state file {path}: version {doc.get('version')}, want {STATE_VERSION}")
        if doc.get("set") != set_name:
            raise ValueError(f"state file {path} belongs to set {doc.get('set')!r}, not {set_name!r}")
        doc["checkpoints"] = [Checkpoint(**c) for c in doc.get("checkpoints", [])]
        return cls(**doc)

    def save(self, path: str) -> None:
        """Writes the state atomically: a crash leaves the old file or the
        new one, never half of one."""
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(self), f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dirfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)


@dataclass
class Options:
    set: str
    state_path: str
    batch: int = 32
    wait_ms: int = 5000
    checkpoint_every: int = 0
    participants: List[str] = field(default_factory=list)
    checkpoint_timeout: str = "60s"
    checkpoint_wait: float = 120.0
    outage_timeout: float = 300.0
    stop_after: int = 0
    step_ms: int = 0  # how long one training step (one batch) takes, to mimic a real trainer's pace
    submit: Optional[Dict[str, Any]] = None  # keyword arguments of Client.submit; None: attach


class Trainer:
    """One trainer of one set. run() returns the summary, or raises
    SetStalled when the gateway's watchdog fires."""

    def __init__(self, client: Client, opts: Options, log: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.opts = opts
        self.log = log
        self.clock = clock
        self.sleep = sleep
        self.state = State.load(opts.state_path, opts.set)
        self._health = ""

    def run(self) -> Dict[str, Any]:
        self._ensure_submitted()
        self._send_pending_ack()
        while True:
            page = self._resilient(lambda: self.client.feed(
                self.opts.set, self.state.cursor, self.opts.batch, self.opts.wait_ms))
            self._consume(page, page["cursor"])
            self._checkpoints()
            if self.opts.stop_after and len(self.state.trained) >= self.opts.stop_after:
                self.log(f"stopping after {len(self.state.trained)} results (--stop-after); run again to continue")
                return self.summary(done=False)
            if page["done"] and self._sweep() == 0:
                self._await_checkpoints()
                return self.summary(done=True)

    # -- steps ----------------------------------------------------------

    def _ensure_submitted(self) -> None:
        st, submit = self.state, self.opts.submit
        if st.submitted or submit is None:
            return
        if not st.submit_request_id:
            st.submit_request_id = f"submit.{st.set}"
            self._save()
        try:
            res = self._resilient(lambda: self.client.submit(self.opts.set, request_id=st.submit_request_id, **submit))
        except Conflict:
            self.log(f"set {st.set} exists and was submitted with another request (use --attach to consume it)")
            raise
        self.log(f"set {res['set']}: {res['rollouts']} rollouts ({res['started']} started now, "
                 f"{res['existing']} before)")
        st.submitted = True
        self._save()

    def _consume(self, page: FeedResponse, cursor: Optional[str]) -> int:
        """Trains on the new items of a page, saves, then acknowledges:
        training, cursor and the acknowledgement to send are written in one
        atomic save, so a crash anywhere repeats no training."""
        self._report_health(page["health"])
        receipts: List[Receipt] = []
        new = 0
        for item in page["items"]:
            new += self._take(item, receipts)
        if new and self.opts.step_ms:
            self.sleep(self.opts.step_ms / 1000.0)  # the gradient step this loop stands in for
        self.state.cursor = cursor
        if receipts:
            self.state.pending_ack = {"request_id": new_request_id("ack"), "receipts": receipts}
        self._save()
        self._send_pending_ack()
        return new

    def _take(self, item: ExportLine, receipts: List[Receipt]) -> int:
        """Trains on one feed item unless it was trained on before; returns
        1 for a new item."""
        st, rid = self.state, item["rollout_id"]
        receipt = receipt_of(item)
        if item.get("status") != "completed" or receipt is None:
            if rid in st.failed:
                return 0
            st.failed[rid] = item.get("failure") or item.get("status", "failed")
            self.log(f"rollout {rid} {item.get('status')}: {st.failed[rid]}")
            return 1
        st.deliveries[rid] = st.deliveries.get(rid, 0) + 1
        if item.get("held"):
            receipts.append(receipt)
        if rid in st.trained:
            st.redelivered += 1
            if st.trained[rid] != receipt["sha256"]:
                self.log(f"rollout {rid} came back with another receipt; not trained on again")
            return 0
        self._train(item)
        st.trained[rid] = receipt["sha256"]
        return 1

    def _train(self, item: ExportLine) -> None:
        """Stands in for a gradient step: accumulates the reward and the
        token counts."""
        st = self.state
        st.reward_sum += float(item.get("reward") or 0.0)
        usage = item.get("usage") or {}
        st.prompt_tokens += int(usage.get("prompt_tokens", 0))
        st.completion_tokens += int(usage.get("completion_tokens", 0))
        for msg in item.get("messages") or []:
            st.generated_token_ids += len(msg.get("generation_token_ids") or [])

    def _send_pending_ack(self) -> None:
        pending = self.state.pending_ack
        if not pending:
            return
        res = self._resilient(lambda: self.client.acknowledge(
            self.opts.set, pending["receipts"], request_id=pending["request_id"]))
        self.state.acknowledged += len(pending["receipts"])
        self.state.pending_ack = None
        self._save()
        if res["closed"]:
            self.log(f"{res['closed']} acknowledged rollouts had closed already")

    def _sweep(self) -> int:
        """The feed said done: read it once more from the oldest
        unacknowledged result, so a result a cursor passed over is still
        trained on. Returns how many new items it found."""
        cursor: Optional[str] = None
        found = 0
        while True:
            page = self._resilient(lambda: self.client.feed(self.opts.set, cursor, self.opts.batch, 0))
            found += self._consume(page, self.state.cursor)
            cursor = page["cursor"]
            if page["done"] or not page["items"]:
                break
        if found:
            self.state.swept += found
            self._save()
            self.log(f"the final sweep found {found} results the feed's cursor had passed")
        return found

    def _checkpoints(self) -> None:
        """Asks for a checkpoint every checkpoint_every results, one at a
        time, and follows the one running."""
        st, every = self.state, self.opts.checkpoint_every
        if every <= 0:
            return
        if st.next_checkpoint_at == 0:
            st.next_checkpoint_at = every
        running = [c for c in st.checkpoints if c.status in ("requested", "running")]
        for c in running:
            self._start_or_follow(c)
        if any(c.status in ("requested", "running") for c in st.checkpoints):
            return
        if len(st.trained) >= st.next_checkpoint_at:
            cp_id = f"{st.set[:80]}-k{len(st.checkpoints) + 1}"
            cp = Checkpoint(id=cp_id, request_id=f"checkpoint.{cp_id}", at=len(st.trained))
            st.checkpoints.append(cp)
            st.next_checkpoint_at = (len(st.trained) // every + 1) * every
            self._save()  # the request id survives a crash before the answer
            self._start_or_follow(cp)

    def _start_or_follow(self, cp: Checkpoint) -> None:
        if cp.status == "requested":
            res = self._resilient(lambda: self.client.checkpoint(
                cp.id, self.opts.set, self.opts.participants or None,
                timeout=self.opts.checkpoint_timeout, request_id=cp.request_id))
            cp.status = "running"
            self.log(f"checkpoint {cp.id} at {cp.at} results: started ({res['workflow_id']})")
            self._save()
        st = self._resilient(lambda: self.client.checkpoint_status(cp.id))
        if st["status"] == "running":
            return
        cp.status, cp.error = st["status"], st.get("error", "")
        if cp.status == "completed":
            members = (st.get("result") or {}).get("members", "?")
            self.log(f"checkpoint {cp.id} completed ({members} members)")
        else:
            self.log(f"checkpoint {cp.id} {cp.status}: {cp.error}")
        self._save()

    def _await_checkpoints(self) -> None:
        deadline = self.clock() + self.opts.checkpoint_wait
        while any(c.status == "running" for c in self.state.checkpoints):
            for c in self.state.checkpoints:
                if c.status == "running":
                    self._start_or_follow(c)
            if self.clock() > deadline:
                self.log("checkpoints still running at exit; see GET /v1/checkpoints/{id}")
                return
            if any(c.status == "running" for c in self.state.checkpoints):
                self.sleep(0.5)

    # -- plumbing -------------------------------------------------------

    def _resilient(self, call: Callable[[], Any]) -> Any:
        """Runs a call, riding out a gateway outage (every retry of the
        client failed: the gateway restarts, Temporal is briefly away) for
        up to outage_timeout seconds. Any other error is raised."""
        deadline = self.clock() + self.opts.outage_timeout
        while True:
            try:
                return call()
            except (TransportError, Unavailable) as e:
                if self.clock() > deadline:
                    raise
                self.log(f"gateway unavailable, still trying: {e}")
                self.sleep(1.0)

    def _report_health(self, health: Dict[str, Any]) -> None:
        """Logs each change of the set's health; a stalled set stops the
        trainer even if a gateway reported it in a page, not as an error."""
        if health.get("state") == "stalled":
            raise SetStalled(409, "set_stalled", str(health.get("reason") or "set stalled"), "", dict(health))
        line = f"{health.get('state')}: {health.get('reason')}" if health.get("reason") else str(health.get("state"))
        if line != self._health:
            self._health = line
            self.log(f"set health {line} ({health.get('completed', 0)} completed, {health.get('failed', 0)} failed, "
                     f"{health.get('running', 0)} running)")

    def _save(self) -> None:
        self.state.save(self.opts.state_path)

    def summary(self, done: bool) -> Dict[str, Any]:
        st = self.state
        n = len(st.trained)
        return {
            "set": st.set, "done": done, "trained": n, "failed": len(st.failed),
            "acknowledged": st.acknowledged, "mean_reward": st.reward_sum / n if n else 0.0,
            "reward_sum": st.reward_sum, "prompt_tokens": st.prompt_tokens,
            "completion_tokens": st.completion_tokens, "generated_token_ids": st.generated_token_ids,
            "redelivered": st.redelivered, "swept": st.swept,
            "checkpoints": [asdict(c) for c in st.checkpoints],
        }


def read_rows(path: str) -> List[DatasetRow]:
    """Reads a JSONL dataset; every malformed line is reported at once."""
    rows: List[DatasetRow] = []
    bad: List[str] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                bad.append(f"line {n}: {e}")
                continue
            if not isinstance(row, dict) or "env" not in row or "task" not in row:
                bad.append(f"line {n}: want an object with env and task")
                continue
            rows.append(row)  # type: ignore[arg-type]
    if bad:
        raise ValueError(f"dataset {path}: " + "; ".join(bad))
    return rows


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Trainer loop over the turnstile gateway (see the module docstring).")
    p.add_argument("--gateway", default=os.environ.get("TURNSTILE_GATEWAY_URL", "http://127.0.0.1:8088"),
                   help="gateway URL (default $TURNSTILE_GATEWAY_URL or http://127.0.0.1:8088)")
    p.add_argument("--token", default=os.environ.get("TURNSTILE_GATEWAY_TOKEN", ""),
                   help="bearer token (default $TURNSTILE_GATEWAY_TOKEN)")
    p.add_argument("--operator-token", default=os.environ.get("TURNSTILE_GATEWAY_OPERATOR_TOKEN", ""),
                   help="the operator role's token, for --checkpoint-every (default $TURNSTILE_GATEWAY_OPERATOR_TOKEN)")
    p.add_argument("--set", required=True, help="the set to submit and consume")
    p.add_argument("--state", required=True, help="the trainer's state file (created if missing)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--dataset", help="JSONL dataset, sent inline")
    src.add_argument("--dataset-path", help="JSONL dataset on the gateway's disk")
    src.add_argument("--envs", help="comma-separated environments, with --count")
    src.add_argument("--attach", action="store_true", help="consume a set submitted elsewhere")
    p.add_argument("--count", type=int, help="rollouts, with --envs")
    p.add_argument("--repeats", type=int, help="rollouts per dataset row (one group)")
    p.add_argument("--seed", type=int)
    p.add_argument("--policy", help="model name (default: each environment's scripted policy)")
    p.add_argument("--model-url", help="OpenAI-compatible base URL")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--capture-tokens", action="store_true", help="ask the endpoint for token ids and log-probs")
    p.add_argument("--batch", type=int, default=32, help="results per feed poll (K)")
    p.add_argument("--wait-ms", type=int, default=5000, help="long-poll wait")
    p.add_argument("--checkpoint-every", type=int, default=0, help="request a checkpoint every K results (0: never)")
    p.add_argument("--participant", action="append", default=[], help="environment server URL of checkpoints")
    p.add_argument("--checkpoint-timeout", default="60s", help="deadline of each checkpoint's cut (Go duration)")
    p.add_argument("--outage-timeout", type=float, default=300.0, help="seconds to ride out an unreachable gateway")
    p.add_argument("--stop-after", type=int, default=0, help="stop after this many results (state kept)")
    p.add_argument("--step-ms", type=int, default=0, help="time one training step takes (a stand-in's pace)")
    args = p.parse_args(argv)
    if args.envs and not args.count:
        p.error("--envs needs --count")
    if not (args.dataset or args.dataset_path or args.envs or args.attach):
        p.error("one of --dataset, --dataset-path, --envs or --attach is required")
    return args


def submit_request(args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    if args.attach:
        return None
    req: Dict[str, Any] = {"repeats": args.repeats, "seed": args.seed, "policy": args.policy,
                           "model_url": args.model_url, "max_turns": args.max_turns, "require_ack": True}
    if args.capture_tokens:
        req["sampling"] = {"capture_tokens": True}
    if args.dataset:
        req["rows"] = read_rows(args.dataset)
    elif args.dataset_path:
        req["dataset_path"] = args.dataset_path
    else:
        req["envs"], req["count"] = args.envs.split(","), args.count
    return {k: v for k, v in req.items() if v is not None}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)

    def log(msg: str) -> None:
        print(f"trainer: {msg}", file=sys.stderr, flush=True)

    try:
        opts = Options(set=args.set, state_path=args.state, batch=args.batch, wait_ms=args.wait_ms,
                       checkpoint_every=args.checkpoint_every, participants=args.participant,
                       checkpoint_timeout=args.checkpoint_timeout, outage_timeout=args.outage_timeout,
                       stop_after=args.stop_after, step_ms=args.step_ms,
                       submit=submit_request(args))
        client = Client(args.gateway, args.token or None, operator_token=args.operator_token or None,
                        retry=RetryPolicy(attempts=6), log=log)
        trainer = Trainer(client, opts, log)
    except (ValueError, OSError) as e:
        print(f"trainer: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = trainer.run()
    except SetStalled as e:
        log(f"aborting: set {args.set} stalled: {e.reason}")
        print(json.dumps({**trainer.summary(done=False), "aborted": e.reason, "health": e.health}))
        return EXIT_STALLED
    except (APIError, TurnstileError) as e:
        log(f"failed: {e}")
        return EXIT_ERROR
    print(json.dumps(summary))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
