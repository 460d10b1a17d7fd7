"""Shared helpers for the MCP harness and tests: a live `favlo serve` in a
temporary home, and the `io.modelcontextprotocol/tasks` extension for the
official `mcp` Python SDK (which ships the extension hooks but not this one).
"""
from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import requests
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(Result):
    """`resultType: "task"` answer to tools/call."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"]
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class _TaskParams(RequestParams):
    task_id: str


class TasksGet(Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams
    name_param = "taskId"


class TasksCancel(Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams
    name_param = "taskId"


_ANY = TypeAdapter(dict[str, Any])


async def tasks_get(session, task_id: str) -> dict[str, Any]:
    return await session.send_request(TasksGet(params=_TaskParams(task_id=task_id)), _ANY)


async def tasks_cancel(session, task_id: str) -> dict[str, Any]:
    return await session.send_request(TasksCancel(params=_TaskParams(task_id=task_id)), _ANY)


async def _poll(handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
    import asyncio

    while True:
        t = await tasks_get(ctx.session, handle.task_id)
        if t["status"] == "completed":
            return CallToolResult.model_validate(t["result"], by_name=False)
        if t["status"] in ("failed", "cancelled"):
            msg = (t.get("error") or {}).get("message") or t["status"]
            return CallToolResult(content=[{"type": "text", "text": msg}], is_error=True)
        await asyncio.sleep((handle.poll_interval_ms or 2000) / 1000 / 20)


class Tasks(ClientExtension):
    """Advertises the tasks extension; `Client.call_tool` then polls to the end."""

    identifier = TASKS

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_poll)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def temp_home(models_home: str) -> str:
    """A fresh FAVLO_HOME whose models/ is the given home's (media files,
    settings and the lock go to the temporary one)."""
    home = tempfile.mkdtemp(prefix="favlo-home-")
    src = Path(models_home)
    os.symlink(src / "models", Path(home) / "models")
    reg = src / "registry.toml"
    if reg.exists():
        os.symlink(reg, Path(home) / "registry.toml")
    return home


def start_server(binary: str, home: str, *extra: str):
    """`favlo serve` on a free port; returns (process, base URL)."""
    port = free_port()
    env = dict(os.environ, FAVLO_HOME=home)
    p = subprocess.Popen([binary, "serve", "--port", str(port), "--no-default-pull", *extra], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(Path(home) / "serve.log", "w"))
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(base + "/health", timeout=1).ok:
                return p, base
        except requests.RequestException:
            time.sleep(0.2)
    p.kill()
    raise RuntimeError("favlo serve did not answer /health")
