"""End-to-end: the official `openai` SDK against a real `favlo serve`.

Needs: FAVLO_BIN (the binary), FAVLO_HOME (a home with the default chat and
embeddings models pulled, or network for --pull auto), `pip install openai pytest
jsonschema requests`. Optional FAVLO_CHAT / FAVLO_CHAT_B / FAVLO_EMB model ids.
"""
import base64, json, os, socket, struct, subprocess, time

import jsonschema, openai, pytest, requests

CHAT = os.environ.get("FAVLO_CHAT", "smollm2-135m-instruct")
CHAT_B = os.environ.get("FAVLO_CHAT_B", "qwen2.5-coder-0.5b-instruct")
EMB = os.environ.get("FAVLO_EMB", "all-minilm-l6-v2")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = free_port()
    env = dict(os.environ, FAVLO_HOME=os.environ["FAVLO_HOME"])
    p = subprocess.Popen([os.environ["FAVLO_BIN"], "serve", "--port", str(port), "--api-key", "test-key"], env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if requests.get(base + "/health", timeout=1).ok:
                break
        except requests.RequestException:
            time.sleep(0.5)
    else:
        p.kill()
        pytest.fail("favlo serve did not answer /health")
    yield base
    p.terminate()
    p.wait(30)


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="test-key", max_retries=0, timeout=600)


def hi(text="Say hello in one word."):
    return [{"role": "user", "content": text}]


def test_list_models(client):
    ids = {m.id: m for m in client.models.list().data}
    assert CHAT in ids and EMB in ids
    assert ids[CHAT].owned_by == "favlo" and ids[CHAT].model_extra["kind"] == "chat"


def test_chat_whole_and_stream(client):
    r = client.chat.completions.create(model=CHAT, messages=hi(), max_tokens=16, temperature=0, seed=1)
    assert r.choices[0].message.content and r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    chunks = list(client.chat.completions.create(model=CHAT, messages=hi(), max_tokens=16, temperature=0,
                                                  stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_tool_call_round_trip(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    msgs = hi("What is the weather in Paris? Use the tool.")
    r = client.chat.completions.create(model=CHAT_B, messages=msgs, tools=tools, temperature=0, max_tokens=128)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    json.loads(call.function.arguments)
    msgs += [r.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "18 C, sunny"}]
    r2 = client.chat.completions.create(model=CHAT_B, messages=msgs, tools=tools, temperature=0, max_tokens=64)
    assert r2.choices[0].message.content


def test_forced_tool_choice_whole_and_stream(client):
    """tool_choice naming a function (or "required") constrains the reply to one
    call whose arguments satisfy the function's parameter schema."""
    params = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"]}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}},
             {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    msgs = hi("Weather in Oslo for 3 days?")
    named = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(model=CHAT, messages=msgs, tools=tools, tool_choice=named,
                                       temperature=0, max_tokens=64)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), params)
    r = client.chat.completions.create(model=CHAT, messages=msgs, tools=tools[:1], tool_choice="required",
                                       temperature=0, max_tokens=64)
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    chunks = list(client.chat.completions.create(model=CHAT, messages=msgs, tools=tools, tool_choice=named,
                                                 temperature=0, max_tokens=64, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls and calls[0].function.name == "get_weather"
    args = "".join(tc.function.arguments or "" for tc in calls)
    jsonschema.validate(json.loads(args), params)
    assert not "".join(d.content or "" for d in deltas).strip()
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=CHAT, messages=msgs, tools=tools, max_tokens=8,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})


def test_json_schema_output(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = client.chat.completions.create(model=CHAT, messages=hi("Give a person as JSON."), max_tokens=64, temperature=0,
                                       response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_embeddings_float_and_base64(client):
    r = client.embeddings.create(model=EMB, input=["a cat", "a dog"])
    assert r.model == EMB and len(r.data) == 2 and r.usage.prompt_tokens > 0
    raw = requests.post(client.base_url.__str__().rstrip("/") + "/embeddings", headers={"Authorization": "Bearer test-key"},
                        json={"model": EMB, "input": "a cat", "encoding_format": "base64"}).json()
    vec = struct.unpack(f"<{len(r.data[0].embedding)}f", base64.b64decode(raw["data"][0]["embedding"]))
    assert max(abs(a - b) for a, b in zip(vec, r.data[0].embedding)) < 1e-6


def test_model_switch(client, server):
    client.chat.completions.create(model=CHAT, messages=hi(), max_tokens=4)
    client.chat.completions.create(model=CHAT_B, messages=hi(), max_tokens=4)
    mem = requests.get(server + "/v1/memory", headers={"Authorization": "Bearer test-key"}).json()
    assert mem["resident"] == CHAT_B
    client.chat.completions.create(model=CHAT, messages=hi(), max_tokens=4)


def test_disconnect_then_next_request(client):
    stream = client.chat.completions.create(model=CHAT, messages=hi("Count to one thousand."), max_tokens=2000, stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    r = client.chat.completions.create(model=CHAT, messages=hi(), max_tokens=4)
    assert r.choices[0].message.content is not None


@pytest.mark.parametrize("kwargs,status", [
    (dict(model="no-such-model", messages=hi()), 404),
    (dict(model="../../etc/passwd", messages=hi()), 404),
    (dict(model=CHAT, messages=hi(), n=2), 400),
    (dict(model=CHAT, messages=[]), 400),
    (dict(model=CHAT, messages=hi(), temperature=5), 400),
    (dict(model=EMB, messages=hi()), 400),
])
def test_errors(client, kwargs, status):
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(**kwargs)
    assert e.value.status_code == status
    assert set(e.value.body) >= {"message", "type", "param", "code"}


def test_raw_errors(server):
    h = {"Authorization": "Bearer test-key", "Content-Type": "application/json"}
    assert requests.post(server + "/v1/chat/completions", data="{bad", headers=h).status_code == 400
    assert requests.get(server + "/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
    big = requests.post(server + "/v1/chat/completions", headers=h, data=json.dumps(
        {"model": CHAT, "messages": [{"role": "user", "content": "x" * (64 << 20)}]}))
    assert big.status_code == 413 and "error" in big.json()
    assert requests.post(server + "/v1/embeddings", headers=h, json={"model": EMB, "input": " "}).json()["error"]["param"] == "input"


def test_audio_speech_wav_and_flac(client):
    """/v1/audio/speech runs the Piper voice as a media job: a WAV of speech
    length with energy (`sox` stats agree when sox is installed), FLAC on
    request, clear 400s for formats it does not make."""
    import io, math, shutil, tempfile, wave
    text = "Hello from Favlo. The voice runs in its own runtime."
    r = client.audio.speech.create(model="piper-joe-medium", voice="alloy", input=text, response_format="wav")
    assert r.response.headers["content-type"] == "audio/wav"
    w = wave.open(io.BytesIO(r.content))
    n, rate = w.getnframes(), w.getframerate()
    samples = struct.unpack(f"<{n}h", w.readframes(n))
    seconds = n / rate
    rms = math.sqrt(sum(x * x for x in samples) / n) / 32768
    assert rate == 22050 and w.getnchannels() == 1
    assert 1.5 < seconds < 10 and rms > 0.01, (seconds, rms)
    if shutil.which("sox"):
        with tempfile.NamedTemporaryFile(suffix=".wav") as f:
            f.write(r.content)
            f.flush()
            stat = subprocess.run(["sox", f.name, "-n", "stat"], capture_output=True, text=True).stderr
        fields = {k.strip(): v.strip() for k, v in (l.split(":", 1) for l in stat.splitlines() if ":" in l)}
        assert abs(float(fields["Length (seconds)"]) - seconds) < 0.01
        assert float(fields["RMS     amplitude"]) > 0.01
    flac = client.audio.speech.create(model="piper-joe-medium", voice="alloy", input=text, response_format="flac")
    assert flac.content[:4] == b"fLaC" and flac.response.headers["content-type"] == "audio/flac"
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="piper-joe-medium", voice="alloy", input=text, response_format="mp3")
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.speech.create(model="piper-joe-medium", voice="alloy", input=" ")
    assert e.value.body["param"] == "input"
