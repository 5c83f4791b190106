"""The fleet from the SLOs (``make fleet``, ``python -m simulator fleet``): the traffic scenarios
the capacity gate replays (:mod:`simulator.fleet.scenarios`), the search for the cheapest bounds
that pass it (``solver``) and what ``make fleet`` prints (``report``)."""
