"""How many lines `make demo-serve` (container/demo.py) prints at most: the serving section of
`make demo`'s story, whose line budget (tools/demo.py, tests/infra/test_demo_story.py) counts on
it. Standard library only, so the CDK venv (no httpx, no vLLM) reads it too;
tests/container/test_demo_serve.py holds a real run to it."""

#: Startup lines at most: the three phases (validate, engine_load, warmup) and the heartbeats.
MAX_STARTUP_LINES = 8
#: Lines besides the startup ones and one per answer: the log's name, the phase summary, the
#: note on random weights, the SIGTERM line, and a FAILED line when an answer is empty.
FIXED_LINES = 5
#: Answers at most: the base model and up to this many adapters (vLLM's --max-loras bounds what
#: one instance serves at once; the tiny model has 3).
MAX_ADAPTERS = 4
MAX_LINES = MAX_STARTUP_LINES + FIXED_LINES + 1 + MAX_ADAPTERS
