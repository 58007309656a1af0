"""Test helpers that ship with the package: the fake OpenAI server (``fake_openai``) and a real vLLM server
(``vllm_server``)."""
