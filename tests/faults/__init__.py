"""The fault-injection harness of issue 12 ("Proof"): link proxies, nemesis, workload, checkers.

- ``linkproxy``: an asyncio TCP proxy per link (delay + jitter, bandwidth, cut/heal) in a thread;
- ``tests/cluster_harness.py`` ``ProxiedCluster``: brokers whose inter-broker and client listeners
  are advertised at proxy ports, so broker<->broker and client<->broker links are cut apart;
- ``nemesis``: seeded, printed, replayable fault schedules (kill -9, SIGSTOP, cuts, etcd leader);
- ``workload``: idempotent acks=all producers and group consumers recording every ack and read;
- ``checker``: pure functions over the recorded history (lost, duplicated, misordered, ...).

A package so that tests (``from faults.checker import ...``, tests/ is on sys.path) and bench/
(which puts tests/ on sys.path) import the same code.
"""
