"""The deploy smoke gate Lambda (handlers ``smoke_gate.handler.handler`` and
``smoke_gate.handler.is_complete``)."""
