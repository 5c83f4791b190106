"""The product's Lambda functions, one package each (``canary_controller``, ``smoke_gate``).

Each package is its function's code: the asset holds the package as a folder at its root and the
handler names it (``canary_controller.handler.handler``; stacks/constructs/python_lambda.py), so
its modules import each other relatively (``from . import rules``), the same in Lambda as under
``lambdas.`` here (tests, stacks, simulator, tools).
"""
