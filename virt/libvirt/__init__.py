"""The libvirt driver: XML objects (``config``), policy (``designer``), the connection
(``host``, the only importer of ``libvirt``), the domain wrapper (``guest``) and the
``ComputeDriver`` implementation (``driver``)."""
