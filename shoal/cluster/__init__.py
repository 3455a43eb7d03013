"""The cluster layer: the one topic-creation planner (:mod:`shoal.cluster.planner`), broker
registration (:mod:`shoal.cluster.registration`, under the broker's etcd session), the controller
(:mod:`shoal.cluster.controller`: election, liveness, leader election, reassignment) and routing
hints (:mod:`shoal.cluster.routing`)."""
