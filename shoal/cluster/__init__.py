"""The cluster layer: the one topic-creation planner (:mod:`shoal.cluster.planner`); broker
registration, controller election, leader election and reassignment join it (issue 11)."""
