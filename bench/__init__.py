"""Tether's benchmarks: each prints its figures and a ratio against a raw baseline.

Run them all with ``python -m bench [--quick] [--nats URL]``, or one with
``python -m bench.ask`` / ``python -m bench.append``. They print figures and never assert
times; ``tests/bench`` only checks that each completes in ``--quick`` mode.
"""
