"""The secrets mask: every shape of API key and Authorization value, and the keys a caller names,
become ``***``; the rest of the text, and texts without a secret, stay as they were."""

import pytest

from lmms_egoplan.core.secrets import MASK, mask_secrets


@pytest.mark.parametrize("text, masked", [
    ("HTTP 401: Authorization: Bearer sk-test-0123456789abcdef", "HTTP 401: Authorization: Bearer ***"),
    ("HTTP 401: {'headers': {'authorization': 'Bearer sk-proj-ZZZZZZZZZZZZZZ'}}",
     "HTTP 401: {'headers': {'authorization': 'Bearer ***'}}"),
    ('{"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}', '{"Authorization": "Basic ***"}'),
    ("proxy said: bearer abcdefghijklmnop was refused", "proxy said: bearer *** was refused"),
    ("Incorrect API key provided: sk-ant-api03-abcdefghij.", "Incorrect API key provided: ***."),
    ("model_version=gpt,api_key=sk-0123456789ab,base_url=http://127.0.0.1:8000/v1",
     "model_version=gpt,api_key=***,base_url=http://127.0.0.1:8000/v1"),
    ("openai_api_key=abc123456789 hf_token=hf_abcdefghijklmnopqrstuvwx", "openai_api_key=*** hf_token=***"),
    ("x-api-key: AIzaSyA-0123456789abcdefghijklmnopqrst", "x-api-key: ***"),
    ("api-key: 0123456789abcdef0123456789abcdef", "api-key: ***"),
    ("https://host/v1?token=abcdef123456&x=1", "https://host/v1?token=***&x=1"),
])
def test_every_shape_of_a_secret_is_masked_and_the_message_around_it_kept(text, masked):
    assert mask_secrets(text) == masked


def test_the_configured_key_is_masked_whatever_its_shape_and_placeholders_are_no_secret():
    assert mask_secrets("the server echoed plainKEY-0123 twice: plainKEY-0123", known=["plainKEY-0123"]) == \
        f"the server echoed {MASK} twice: {MASK}"
    # "EMPTY" / "unused" stand in for a key a local server does not take: masking them would hide words.
    assert mask_secrets("EMPTY response, unused field",
                        known=["EMPTY", "unused", None]) == "EMPTY response, unused field"


@pytest.mark.parametrize("text", [
    "HTTP 500: scripted status 500", "rating 5 is not one of 0, 0.5, 1", "task-skill sk-ed the step",
    "max_tokens=16,temperature=0", "[LMMS_EVAL_REQUEST_FAILED after 1 retries] Error code: 500", "",
])
def test_texts_without_a_secret_are_unchanged(text):
    assert mask_secrets(text) == text


def test_a_judge_that_echoes_the_authorization_header_gets_its_key_masked_in_the_error():
    from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
    from lmms_egoplan.judge.protocol import Decoding, JudgeCallError
    from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend

    key = "plain-judge-key-0123"  # no key's shape: masked because it is the configured one
    echo = ChatServer(lambda call: Reply(f"bad key {call.headers['authorization']} (x-api-key: {key})", status=401))
    with echo:
        backend = OpenAIChatBackend("judge", base_url=echo.base_url, api_key_env="KEY", environ={"KEY": key})
        with pytest.raises(JudgeCallError) as refused:
            backend.complete([{"role": "user", "content": "rate"}], Decoding())
    assert str(refused.value) == "HTTP 401: bad key Bearer *** (x-api-key: ***)"


def test_an_inference_servers_error_text_is_masked():
    from types import SimpleNamespace

    from lmms_egoplan.models.engines import _error_message

    def response(body):
        return SimpleNamespace(json=lambda: body, text=str(body))

    assert _error_message(response({"error": {"message": "401: Authorization: Bearer hf_abcdefghijklmnopqrstuvwx"}})) \
        == "401: Authorization: Bearer ***"
    unreadable = SimpleNamespace(json=lambda: (_ for _ in ()).throw(ValueError()),
                                 text="<html>api_key=sk-0123456789abcdef</html>")
    assert _error_message(unreadable) == "<html>api_key=***</html>"
