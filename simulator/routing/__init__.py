"""Prefix-aware routing (``python -m simulator routing``): the comparison of SageMaker's routing
strategies (:mod:`simulator.routing.compare`), the strategies themselves (``strategies``), the
fleet behind one router (``fleet``), the windows of a trace replayed (``windows``) and the table
(``report``)."""
