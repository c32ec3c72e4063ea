"""Caption rewriters: rules (offline), transformers (a tiny Llama built here), openai (a local server)."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from concrete_jungle.plant.captioners import CaptionerError, RewriteRequest, make_captioner
from concrete_jungle.plant.captioners.validation import check_rewrite, clean_reply
from conftest import require_system_dependency


def request(caption, keyword, category, i=0, attempt=0):
    start = caption.index(keyword)
    return RewriteRequest(f"s{i}", caption, keyword, (start, start + len(keyword)), category, "hc", attempt)


RULE_CASES = [
    ("A person wearing a red helmet", "red", "attribute"),
    ("A wooden boat floating on the water", "wooden", "attribute"),
    ("Two dogs sleeping on a bed", "Two", "attribute"),
    ("A large dog in a park", "large", "attribute"),
    ("A cat sitting under a table", "under", "relation"),
    ("A child standing in front of the tree", "front", "relation"),
    ("A lamp placed to the left of the sofa", "left", "relation"),
    ("A woman holding an umbrella", "holding", "relation"),
    ("A dog running in the park", "dog", "object"),
    ("Three horses eating grass", "horses", "object"),
    ("A woman holding a coffee cup", "coffee cup", "object"),
]


@pytest.mark.system_packages
@pytest.mark.parametrize("wordnet", [True, False])
def test_rules_rewrites_pass_validation(wordnet):
    from concrete_jungle.plant.captioners.rules import WORDNET_ROOT

    if wordnet:
        require_system_dependency((WORDNET_ROOT / "index.noun").exists(), "WordNet 3.0",
                                  "apt-get install wordnet-base")
    captioner = make_captioner("rules", wordnet=wordnet)
    assert captioner.name == ("rules-wordnet3.0" if wordnet else "rules-lexicon")
    for i, (caption, keyword, category) in enumerate(RULE_CASES):
        req = request(caption, keyword, category, i)
        reply = captioner.rewrite([req])[0]
        assert reply.error is None, (caption, reply)
        assert check_rewrite(caption, req.span, category, clean_reply(reply.text)) is None, (caption, reply.text)


def test_rules_specific_substitutions_and_agreement():
    captioner = make_captioner("rules")
    text = lambda *a: captioner.rewrite([request(*a)])[0].text  # noqa: E731
    assert text("A cat sitting under a table", "under", "relation") == "A cat sitting on a table"
    assert text("A child standing in front of the tree", "front", "relation") == "A child standing behind the tree"
    assert text("A lamp placed to the left of the sofa", "left", "relation") == "A lamp placed to the right of the sofa"
    plural = text("Three horses eating grass", "horses", "object")
    assert plural.startswith("Three ") and re.match(r"Three \w+s eating grass", plural)
    # a/an follows the replacement
    for i in range(20):
        out = captioner.rewrite([request("A red apple on a plate", "red", "attribute", i)])[0].text
        word = out.split()[1]
        assert out.split()[0] == ("An" if word[0] in "aeiou" else "A"), out


def test_rules_is_deterministic_and_a_retry_changes_the_choice():
    captioner = make_captioner("rules")
    reqs = [request("A person wearing a red helmet", "red", "attribute", i) for i in range(30)]
    first = [r.text for r in captioner.rewrite(reqs)]
    assert first == [r.text for r in make_captioner("rules").rewrite(reqs)]
    retried = [r.text for r in captioner.rewrite([RewriteRequest(**{**q.__dict__, "attempt": 1}) for q in reqs])]
    assert retried != first


def test_rules_reports_words_it_cannot_replace():
    reply = make_captioner("rules").rewrite([request("A man placed there", "placed", "attribute")])[0]
    assert reply.text == "" and "no substitute known" in reply.error


# ----------------------------------------------------------------------------- transformers, tiny Llama


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from concrete_jungle.models.tiny import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("lm") / "tiny-llama")


def test_transformers_captioner_loads_by_path_and_generates_per_request(tiny_lm):
    captioner = make_captioner("transformers", model=str(tiny_lm), batch_size=2, max_new_tokens=6)
    assert captioner.tokenizer.padding_side == "left"
    reqs = [request(c, k, cat, i) for i, (c, k, cat) in enumerate(RULE_CASES[:5])]
    replies = captioner.rewrite(reqs)
    assert len(replies) == 5 and all(r.error is None and isinstance(r.text, str) for r in replies)
    again = captioner.rewrite(reqs)
    assert [r.text for r in again] == [r.text for r in replies]  # greedy: same prompt, same reply
    # batching does not change a greedy reply: each prompt alone gives what it gave in a padded batch
    alone = [captioner.rewrite([q])[0].text for q in reqs[:2]]
    assert alone == [r.text for r in replies[:2]]
    # the chat template is applied
    assert captioner._text(reqs[0]).startswith("<s>user: **Task**")


# ----------------------------------------------------------------------------- openai, a local server


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible server; the caption decides how it misbehaves."""

    calls: dict = {}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _send(self, status, body, headers=()):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "Qwen/Qwen3-32B", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        caption, keyword = re.search(r"Input: ([^,]*?) Keyword: (.*?) Output:$", prompt).groups()
        with self.lock:
            n = self.calls[caption] = self.calls.get(caption, 0) + 1
            self.calls.setdefault("_bodies", []).append(body)
            self.calls["_active"] = self.calls.get("_active", 0) + 1
            self.calls["_max_active"] = max(self.calls.get("_max_active", 0), self.calls["_active"])
        try:
            self._answer(caption, keyword, n)
        finally:
            with self.lock:
                self.calls["_active"] -= 1

    def _answer(self, caption, keyword, n):
        if "busy" in caption and n <= 2:
            return self._send(429, {"error": "rate limited"}, [("Retry-After", "0")])
        if "broken" in caption and n == 1:
            return self._send(500, {"error": "internal"})
        if "garbled" in caption:
            return self._send(200, "{not json")
        if "slow" in caption:
            time.sleep(0.3)
        reply = "<think></think>Output: " + caption.replace(keyword, "blue") + "."
        self._send(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply}}]})


@pytest.fixture
def server():
    FakeOpenAI.calls = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_captioner_retries_and_reports(server, monkeypatch):
    monkeypatch.setenv("CJ_TEST_KEY", "sk-secret")
    captioner = make_captioner("openai", model="Qwen/Qwen3-32B", base_urls=[server, server], concurrency=8,
                               backoff=0.01, max_retries=3, api_key_env="CJ_TEST_KEY")
    cases = ["A red car", "A busy red street", "A broken red chair", "A slow red train", "A garbled red kite"]
    reqs = [request(c, "red", "attribute", i) for i, c in enumerate(cases)]
    replies = captioner.rewrite(reqs * 4)  # 20 requests
    assert FakeOpenAI.calls["_max_active"] > 1  # requests were in flight together, not one by one
    by_caption = dict(zip(cases * 4, replies))
    for caption in ("A red car", "A busy red street", "A broken red chair", "A slow red train"):
        reply = by_caption[caption]
        assert reply.error is None and clean_reply(reply.text) == caption.replace("red", "blue") + "."
    assert "malformed response body" in by_caption["A garbled red kite"].error
    assert "after 4 tries" in by_caption["A garbled red kite"].error
    body = FakeOpenAI.calls["_bodies"][0]
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["model"] == "Qwen/Qwen3-32B"
    assert body["temperature"] == 0.0


def test_openai_unreachable_server_is_an_error_before_any_work():
    with pytest.raises(CaptionerError, match="cannot reach the OpenAI-compatible server at http://127.0.0.1:9/v1"):
        make_captioner("openai", model="Qwen/Qwen3-32B", base_urls="http://127.0.0.1:9/v1", timeout=2)


def test_openai_wrong_model_is_an_error(server):
    with pytest.raises(CaptionerError, match="serves \\['Qwen/Qwen3-32B'\\], not 'llama'"):
        make_captioner("openai", model="llama", base_urls=server)


class KeyEchoServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that records the Authorization header and, in the failing modes, echoes it
    back in its error bodies (as careless servers and proxies do)."""

    mode = "ok"
    seen: list = []

    def log_message(self, *args):
        pass

    def _send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        self._send(200, {"data": [{"id": "Qwen/Qwen3-32B"}]})

    def do_POST(self):
        auth = self.headers.get("Authorization")
        self.seen.append(auth)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode != "ok":
            return self._send(401 if self.mode == "401" else 500, {"error": f"rejected credentials: {auth}"})
        caption, keyword = re.search(r"Input: ([^,]*?) Keyword: (.*?) Output:$",
                                     body["messages"][0]["content"]).groups()
        self._send(200, {"choices": [{"message": {"content": caption.replace(keyword, "purple", 1)}}]})


@pytest.mark.processes
@pytest.mark.parametrize("mode", ["ok", "401", "500"])
def test_the_api_key_reaches_the_server_and_nothing_else(tmp_path, mode):
    from plant_fixtures import make_dataset

    key = "sk-test-7f3a9c41e2b84d06"
    KeyEchoServer.mode, KeyEchoServer.seen = mode, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), KeyEchoServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    captions, images = make_dataset(tmp_path, 12)
    out = tmp_path / "cb"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "concrete_jungle.cli", "plant", "--captions", str(captions), "--images",
             str(images), "--out", str(out), "--mode", "hc", "--captioner", "openai", "--model", "Qwen/Qwen3-32B",
             "--base-url", f"http://127.0.0.1:{httpd.server_address[1]}/v1", "--api-key-env", "CJ_TEST_KEY",
             "--captioner-option", "max_retries=1", "--captioner-option", "backoff=0.01"],
            env={**os.environ, "CJ_TEST_KEY": key}, capture_output=True, text=True, timeout=300)
    finally:
        httpd.shutdown()
    assert run.returncode == 0, run.stderr[-2000:]
    assert KeyEchoServer.seen and set(KeyEchoServer.seen) == {f"Bearer {key}"}  # every request carried it
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"config.yaml", "manifest.jsonl", "rejects.jsonl", "summary.json"}
    leaks = [str(p) for p in written if key.encode() in p.read_bytes()]
    assert not leaks and key not in run.stdout and key not in run.stderr
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    if mode == "ok":
        assert list(out.glob("shard-*.tar")) and not rejects
    elif mode == "401":  # the server's complaint is kept, without the key it echoed
        assert len(rejects) == 12 and all("rejected credentials: Bearer [API key]" in r["reason"] for r in rejects)
    else:  # retried, then rejected with the status
        assert len(rejects) == 12 and all("HTTP 500" in r["reason"] for r in rejects)


def test_offline_rewrites_stay_in_the_keyword_s_group_and_a_time_is_no_place(nlp, ratings):
    from concrete_jungle.plant.captioners import RewriteRequest
    from concrete_jungle.plant.captioners.rules import OBJECT_GROUPS, RulesCaptioner
    from concrete_jungle.plant.keywords import extract_candidates

    captioner = RulesCaptioner(wordnet=False)

    def rewrite(caption, keyword, category):
        start = caption.index(keyword)
        return captioner.rewrite([RewriteRequest("x", caption, keyword, (start, start + len(keyword)), category,
                                                 "hc", 0, 0)])[0]

    assert rewrite("A sunny day at the beach.", "day", "object").error.startswith("no substitute known for 'day'")
    food = next(g for g in OBJECT_GROUPS if "egg" in g)
    for attempt in range(5):
        reply = captioner.rewrite([RewriteRequest("x", "A fried egg on toast.", "egg", (8, 11), "object", "hc",
                                                  attempt, 0)])[0]
        assert reply.text.removeprefix("A fried ").removesuffix(" on toast.") in food
    found = {c.text: c.category for c in extract_candidates(nlp("A dog running on a sunny day."), ratings)}
    assert "on" not in found  # `on a sunny day` places nothing
    found = {c.text: c.category for c in
             extract_candidates(nlp("A man sitting on the table and watching TV."), ratings)}
    assert found.get("watching") == "relation" and found.get("on") == "relation"


@pytest.mark.system_packages
@pytest.mark.parametrize("caption, keyword, rewrites", [
    # worn, not a place: `on a hoodie` read as nonsense; the wearer holds or carries it instead
    ("A man in a florescent green hoodie", "in", {"A man holding a florescent green hoodie",
                                                  "A man carrying a florescent green hoodie"}),
    ("Two women in dresses dance", "in", {"Two women holding dresses dance", "Two women carrying dresses dance"}),
    ("A man wearing a red tie", "wearing", {"A man holding a red tie", "A man carrying a red tie"}),
    # what is in an enclosed place is outside it, not `on a kitchen`
    ("A woman standing in a kitchen", "in", {"A woman standing outside a kitchen"}),
    ("A dog lying on a bed", "on", {"A dog lying under a bed"}),
])
def test_offline_relation_rewrites_keep_a_worn_thing_worn_and_a_room_a_room(caption, keyword, rewrites):
    start = caption.index(f" {keyword} ") + 1
    for wordnet in (False, True):
        replies = make_captioner("rules", wordnet=wordnet).rewrite(
            [RewriteRequest(f"s{i}", caption, keyword, (start, start + len(keyword)), "relation", "hc")
             for i in range(8)])  # eight samples: eight seeded choices
        for reply in replies:
            assert reply.error is None and reply.text in rewrites, reply
            assert check_rewrite(caption, (start, start + len(keyword)), "relation", reply.text) is None


@pytest.mark.parametrize("caption, phrase", [
    ("Two peanut butter sandwiches sliced in half", "in half"),
    ("A lighthouse in the far distance", "in the far distance"),
    ("A plane high in the clear blue sky", "in the clear blue sky"),
    ("A cake covered in sprinkles", "covered in"),
    ("Motorcycles on display at a museum", "on display"),
])
def test_a_preposition_of_a_fixed_phrase_is_a_reject_naming_the_phrase(caption, phrase):
    keyword = phrase.split()[-1] if phrase.endswith(" in") else phrase.split()[0]
    start = caption.index(f" {keyword} ") + 1
    reply = make_captioner("rules").rewrite(
        [RewriteRequest("x", caption, keyword, (start, start + len(keyword)), "relation", "hc")])[0]
    assert reply.text == "" and reply.error == f"a fixed phrase, not a place: {phrase!r} (relation)"


@pytest.mark.system_packages
def test_a_missing_system_dependency_is_named_in_a_sentence(monkeypatch):
    monkeypatch.delenv("CJ_REQUIRE_SYSTEM_DEPS", raising=False)
    for what, verb in (("WordNet 3.0", "is"), ("Chromium and chromedriver", "are")):
        with pytest.raises(pytest.skip.Exception) as skipped:
            require_system_dependency(False, what, "apt-get install it")
        assert str(skipped.value) == f"{what} {verb} not installed (apt-get install it)"
