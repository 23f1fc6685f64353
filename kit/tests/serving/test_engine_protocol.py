"""The engine protocol's two sides: registration refuses an engine that lacks a required method (derived from
the protocol class), and every engine reads answers through `read_response` (native and OpenAI shapes)."""

import pytest

from kit.serving.engines import ENGINES, get_engine, register
from kit.serving.engines.base import Engine, Reply, required_interface


def test_required_interface_is_derived_from_the_protocol():
    assert set(required_interface()) == {"command", "flag"}


def test_registration_refuses_an_incomplete_engine():
    class NoFlags(Engine):
        name = "no-flags"

        def command(self, spec):
            return ["server"]

    with pytest.raises(TypeError, match="does not define flag"):
        register(NoFlags())
    assert "no-flags" not in ENGINES

    class Nameless(Engine):
        def command(self, spec):
            return []

        def flag(self, name):
            return None

    with pytest.raises(ValueError, match="needs a name"):
        register(Nameless())
    with pytest.raises(TypeError, match="subclasses"):
        register(object())


def test_registered_engines_define_the_interface():
    for eng in ENGINES.values():
        for name in required_interface():
            assert getattr(type(eng), name) is not getattr(Engine, name), (eng.name, name)


NATIVE = {
    "text": " world",
    "meta_info": {
        "completion_tokens": 7,
        "prompt_tokens": 3,
        "finish_reason": {"type": "length", "length": 7},
        "spec_verify_ct": 3,
    },
}


@pytest.mark.parametrize("name", ["sglang", "reference"])
def test_read_response_native_and_openai(name):
    eng = get_engine(name)
    r = eng.read_response(NATIVE, "sglang")
    assert (r.completion_tokens, r.prompt_tokens, r.finish_reason, r.text) == (7, 3, "length", " world")
    assert r.spec["verify_ct"] == 3
    chat = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"completion_tokens": 2}}
    r = eng.read_response(chat, "chat")
    assert (r.completion_tokens, r.finish_reason, r.text) == (2, "stop", "hi")
    chunk = {"choices": [{"delta": {"content": "h"}}]}
    assert eng.read_response(chunk, "chat") == Reply(text="h")
    done = {"choices": [{"text": "ok", "finish_reason": "stop"}], "usage": {"completion_tokens": 1, "prompt_tokens": 4}}
    assert eng.read_response(done, "completions") == Reply(1, 4, "stop", "ok")


def test_an_engine_without_a_native_api_says_so():
    from kit.findings import KitInputError

    class OpenAIOnly(Engine):
        name = "openai-only"

        def command(self, spec):
            return []

        def flag(self, name):
            return None

    with pytest.raises(KitInputError, match="no native generate API"):
        OpenAIOnly().read_response(NATIVE, "sglang")
