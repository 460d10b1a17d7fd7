#!/usr/bin/env python3
"""Media preemption harness: a chat preempts a running video job, which then
finishes with the same id and the same bytes as an unpreempted run.

    python3 tools/harness/media_preempt.py            # starts its own favlo serve
    python3 tools/harness/media_preempt.py --base http://127.0.0.1:8129
    python3 tools/harness/media_preempt.py --rounds 5   # benchmark figures

Needs FAVLO_BIN (unless --base) and FAVLO_HOME with the dcgan and default chat
models pulled; `pip install mcp requests`. Exit 0 when every check passed.
Prints: chat time-to-first-token while the job runs (request to first token,
including pause, close and open), the same with the chat model cold and the
device idle, the job's pause latency (preempt asked -> paused at a stage
boundary), its resume overhead (reopening the runtime), and one stage's time.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import requests
from mcp import Client

sys.path.insert(0, str(Path(__file__).parent))
from favlo_mcp import Tasks, start_server, temp_home  # noqa: E402

CHAT = os.environ.get("FAVLO_CHAT", "smollm2-135m-instruct")
VIDEO = {"seed": 20261130, "seconds": 10, "fps": 24}


def ttft(base: str) -> float:
    """Seconds from sending a streamed chat to its first content token."""
    t = time.perf_counter()
    with requests.post(base + "/v1/chat/completions", stream=True, timeout=300, json={
        "model": CHAT, "stream": True, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hi."}]}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                d = json.loads(line[6:])
                if d.get("choices") and d["choices"][0]["delta"].get("content"):
                    first = time.perf_counter() - t
                    for _ in r.iter_lines():
                        pass
                    return first
    raise RuntimeError("no token")


async def read_bytes(c: Client, uri: str) -> tuple[bytes, str]:
    rr = await c.read_resource(uri)
    return base64.b64decode(rr.contents[0].blob), rr.contents[0].mime_type


async def status(c: Client, job: str) -> dict:
    r = await c.call_tool("media_status", {"id": job})
    return r.structured_content


async def one_round(base: str, reference: bytes | None) -> dict:
    async with Client(base + "/mcp", extensions=[Tasks()]) as c:
        # Task mode: the call returns at once with the job id.
        h = await c.session.call_tool("generate_video", VIDEO, allow_claimed=True)
        job = h.task_id
        t0 = time.perf_counter()
        while True:
            s = await status(c, job)
            if s["status"] == "in_progress" and s["progress"]["stage"] >= 2:
                break
            if s["status"] in ("completed", "failed", "cancelled") or time.perf_counter() - t0 > 120:
                raise SystemExit(f"job {job} ended before a chat could preempt it: {s}")
            await asyncio.sleep(0.02)
        first = await asyncio.to_thread(ttft, base)
        during = await status(c, job)
        assert during["id"] == job and during["preemptions"] >= 1, f"not preempted: {during}"
        assert during["status"] in ("in_progress", "completed"), during
        while (s := await status(c, job))["status"] not in ("completed", "failed", "cancelled"):
            await asyncio.sleep(0.05)
        assert s["status"] == "completed", s
        data, mime = await read_bytes(c, s["resource"])
        assert mime == "video/mp4" and data[4:8] == b"ftyp", (mime, data[:12])
        if reference is not None:
            assert data == reference, "the preempted job's MP4 differs from the unpreempted run"
        return {"job": job, "ttft_s": first, "pause_ms": s.get("pause_latency_ms"),
                "resume_ms": s.get("resume_ms"), "preemptions": s["preemptions"],
                "stages": s["progress"]["stages"], "sha256": hashlib.sha256(data).hexdigest()}


async def reference_run(base: str) -> tuple[bytes, float, int]:
    async with Client(base + "/mcp") as c:  # inline mode: the result on the same call
        t = time.perf_counter()
        r = await c.call_tool("generate_video", VIDEO)
        took = time.perf_counter() - t
        s = r.structured_content
        assert not r.is_error and s["status"] == "completed" and s["preemptions"] == 0, s
        data, _ = await read_bytes(c, s["resource"])
        return data, took, s["progress"]["stages"]


def cold_ttft(base: str) -> float:
    """Chat model cold: make the dcgan image model resident, then chat."""
    async def image():
        async with Client(base + "/mcp") as c:
            await c.call_tool("generate_image", {"seed": 1})
    asyncio.run(image())
    return ttft(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="a running favlo serve (default: start one)")
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    proc = None
    base = a.base
    if base is None:
        home = temp_home(os.environ["FAVLO_HOME"])
        proc, base = start_server(os.environ["FAVLO_BIN"], home)
    try:
        ref, ref_s, stages = asyncio.run(reference_run(base))
        stage_ms = ref_s * 1000 / stages
        ttft(base)
        warm = ttft(base)
        colds, rounds = [], []
        for _ in range(a.rounds):
            colds.append(cold_ttft(base))
            rounds.append(asyncio.run(one_round(base, ref)))
        med = lambda xs: statistics.median(xs)  # noqa: E731
        ttft_job = med([r["ttft_s"] for r in rounds]) * 1000
        ttft_cold = med(colds) * 1000
        pause = med([r["pause_ms"] for r in rounds if r["pause_ms"] is not None] or [float("nan")])
        resume = med([r["resume_ms"] for r in rounds if r["resume_ms"] is not None] or [float("nan")])
        print(f"video job: {stages} stages, {ref_s:.2f} s unpreempted, {stage_ms:.0f} ms per stage")
        print(f"chat TTFT, model warm, device idle      : {warm * 1000:7.0f} ms")
        print(f"chat TTFT, model cold, device idle      : {ttft_cold:7.0f} ms")
        print(f"chat TTFT during the video job          : {ttft_job:7.0f} ms  ({ttft_job / ttft_cold:.2f}x cold; goal <= 1.5x)")
        print(f"pause latency (preempt -> paused)       : {pause:7.0f} ms  ({pause / stage_ms:.2f} stages; goal <= 1)")
        print(f"resume overhead (reopen the runtime)    : {resume:7.0f} ms")
        print(f"same bytes as unpreempted: yes ({rounds[0]['sha256'][:16]}..., {len(rounds)} round(s), "
              f"{sum(r['preemptions'] for r in rounds)} preemption(s))")
        return 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    sys.exit(main())
