"""The signed-URL file service that images and migrating disks travel by between machines.

``signing`` signs and checks a request (method, path, expiry) with the cloud's shared
``[transfer] secret``; ``file_server`` serves files read-only to signed requests only;
``download`` fetches one into a local file, sparse and verified; ``names`` is all that the
controller's image endpoint (``/images/<id>``) and each compute host's disk endpoint
(``/disks/<uuid>/<name>``) serve; ``image_source`` is where a host reads an image from
(``[glance] api_servers``). Refuses to know about the database or settings: its callers
(``compute.transfer``, ``novaq image-endpoint``) say what to serve and with which key.
"""
