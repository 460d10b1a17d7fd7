"""End-to-end: the official `mcp` Python SDK against a real `favlo serve` at /mcp.

Inline mode (no tasks extension: the finished result on the same call) and
task mode (the client advertises io.modelcontextprotocol/tasks and polls
tasks/get), resources/read of the PNG and the MP4, media_status and
media_cancel, JSON-RPC errors for bad arguments and ids, and the preemption
harness. Needs FAVLO_BIN and FAVLO_HOME with dcgan-faces and the default chat
model pulled; `pip install mcp requests pytest`.
"""
import asyncio, base64, os, struct, sys, zlib
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "harness"))
from favlo_mcp import Tasks, start_server, tasks_cancel, tasks_get, temp_home  # noqa: E402
import media_preempt  # noqa: E402


@pytest.fixture(scope="module")
def server():
    home = temp_home(os.environ["FAVLO_HOME"])
    p, base = start_server(os.environ["FAVLO_BIN"], home)
    yield base, Path(home)
    p.terminate()
    p.wait(30)


def run(coro):
    return asyncio.run(coro)


def png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    # Every chunk's CRC is right (a real PNG, not a stub).
    i = 8
    while i < len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]
        assert zlib.crc32(data[i + 4:i + 8 + n]) == struct.unpack(">I", data[i + 8 + n:i + 12 + n])[0]
        i += 12 + n
    return w, h


def test_inline_image_and_resources(server):
    base, home = server

    async def go():
        async with Client(base + "/mcp") as c:
            names = [t.name for t in (await c.list_tools()).tools]
            assert {"generate_image", "generate_video", "media_status", "media_cancel"} <= set(names)
            r = await c.call_tool("generate_image", {"seed": 42, "n": 2})
            s = r.structured_content
            assert not r.is_error and s["status"] == "completed" and s["seed"] == 42
            assert "/" not in str(s.get("id")) and str(home) not in str(r.model_dump())
            img = [x for x in r.content if x.type == "image"][0]
            # a 2x1 grid of 64x64 faces with 2-pixel black gutters around and between
            assert png_size(base64.b64decode(img.data)) == (2 * 66 + 2, 66 + 2)
            rr = await c.read_resource(s["resource"])
            assert rr.contents[0].mime_type == "image/png"
            data = base64.b64decode(rr.contents[0].blob)
            assert data == (home / "images" / f"{s['id']}.png").read_bytes()
            # Same seed, same bytes.
            r2 = await c.call_tool("generate_image", {"seed": 42, "n": 2})
            rr2 = await c.read_resource(r2.structured_content["resource"])
            assert base64.b64decode(rr2.contents[0].blob) == data
            listed = [str(x.uri) for x in (await c.list_resources()).resources]
            assert s["resource"] in listed and "favlo://memory" in listed
            mem = await c.read_resource("favlo://memory")
            assert '"budget"' in mem.contents[0].text

    run(go())


def test_task_mode_video_mp4(server):
    base, home = server

    async def go():
        async with Client(base + "/mcp", extensions=[Tasks()]) as c:
            h = await c.session.call_tool("generate_video", {"seed": 7, "seconds": 1, "fps": 12},
                                          allow_claimed=True)
            assert h.result_type == "task" and h.poll_interval_ms == 2000 and h.status == "working"
            while (t := await tasks_get(c.session, h.task_id))["status"] == "working":
                await asyncio.sleep(0.05)
            assert t["status"] == "completed", t
            s = t["result"]["structuredContent"]
            assert s["id"] == h.task_id and s["progress"]["stage"] == s["progress"]["stages"]
            rr = await c.read_resource(f"favlo://videos/{h.task_id}")
            data = base64.b64decode(rr.contents[0].blob)
            assert rr.contents[0].mime_type == "video/mp4" and data[4:8] == b"ftyp"
            assert (home / "videos" / f"{h.task_id}.avi").exists()  # the saved file the MP4 came from
            # Client.call_tool resolves a task by polling, transparently.
            r = await c.call_tool("generate_image", {"seed": 3})
            assert not r.is_error and r.structured_content["status"] == "completed"

    run(go())


def test_cancel_and_errors(server):
    base, _ = server

    async def go():
        async with Client(base + "/mcp", extensions=[Tasks()]) as c:
            long = await c.session.call_tool("generate_video", {"seed": 1, "seconds": 10, "fps": 24},
                                             allow_claimed=True)
            queued = await c.session.call_tool("generate_image", {"seed": 2}, allow_claimed=True)
            r = await c.call_tool("media_cancel", {"id": queued.task_id})
            assert r.structured_content["status"] == "cancelled"
            await tasks_cancel(c.session, long.task_id)
            while (t := await tasks_get(c.session, long.task_id))["status"] == "working":
                await asyncio.sleep(0.05)
            assert t["status"] == "cancelled"
            with pytest.raises(MCPError) as e:
                await c.read_resource(f"favlo://videos/{long.task_id}")
            assert e.value.error.code in (-32002, -32602) and "no videos" in e.value.error.message
            for bad in [{"n": 0}, {"n": "two"}, {"size": "512x512"}, {"seed": -1}, {"response_format": "gif"}]:
                with pytest.raises(MCPError) as e:
                    await c.call_tool("generate_image", bad)
                assert e.value.error.code == -32602, bad
            for uri in ["favlo://images/../x", "favlo://images/a.b", "favlo://nope/x"]:
                with pytest.raises(MCPError) as e:
                    await c.read_resource(uri)
                assert e.value.error.code == -32602, uri
            with pytest.raises(MCPError) as e:
                await c.call_tool("media_status", {"id": "../../etc/passwd"})
            assert e.value.error.code == -32602

    run(go())


def test_preemption_harness(server, capsys):
    base, _ = server
    sys.argv = ["media_preempt.py", "--base", base]
    assert media_preempt.main() == 0
    out = capsys.readouterr().out
    assert "same bytes as unpreempted: yes" in out


def test_generate_speech_task(server):
    base, home = server

    async def go():
        async with Client(base + "/mcp", extensions=[Tasks()]) as c:
            r = await c.call_tool("generate_speech", {"text": "One sentence. And a second one?", "seed": 4,
                                                      "response_format": "flac"})
            s = r.structured_content
            assert not r.is_error and s["status"] == "completed", s
            assert s["progress"] == {"stage": 2, "stages": 2}, s  # one stage per sentence
            rr = await c.read_resource(s["resource"])
            assert rr.contents[0].mime_type == "audio/flac"
            assert base64.b64decode(rr.contents[0].blob)[:4] == b"fLaC"
            assert (home / "voice" / f"{s['id']}.wav").exists()  # the saved WAV the FLAC came from
            with pytest.raises(MCPError) as e:
                await c.call_tool("generate_speech", {"text": ""})
            assert e.value.error.code == -32602

    run(go())
