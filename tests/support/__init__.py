"""Test scaffolding outside the installed package: the fake OpenAI server (``support.fake_openai``, also run as
``python tests/support/fake_openai.py``) and a real vLLM server launcher (``support.vllm_server``). Tests import it
as ``support`` (pytest puts ``tests/`` on ``sys.path``, as for ``conftest`` and ``benchmark_fixtures``)."""
