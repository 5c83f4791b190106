"""Operator scenarios (``python -m simulator scenarios``, ``make simulate``): the registry of
scenarios run (:mod:`simulator.scenarios.registry`), the deploy at the JP evening peak
(``deploy``), the scale-out onto a fallback instance pool (``pools``) and the deploy chart
(``chart``)."""
