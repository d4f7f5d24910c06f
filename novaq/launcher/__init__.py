"""The launchers: ``novaq up`` and ``novaq demo`` on one machine (``cluster``, ``plan``, the
embedded broker, the demo scenario) and the roles of many machines, ``novaq controller``
and ``novaq compute`` (``roles``). They share the process specs (``specs``), the supervised
group (``group``, ``supervisor``, ``children``) and Flower's guard."""
