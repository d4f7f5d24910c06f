"""The one-machine launcher behind ``novaq up`` and ``novaq demo``: the cluster plan
(``plan``), the process supervisor (``cluster``), the embedded broker, Flower's guard and
the demo scenario."""
