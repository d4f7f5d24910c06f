"""The signed-URL file service that images and migrating disks travel by between machines.

``signing`` signs and checks a request (method, path, expiry) with the cloud's shared
``[transfer] secret``; ``file_server`` serves files read-only to signed requests only;
``download`` fetches one into a local file, sparse and verified. The controller's image
endpoint (``image_endpoint``) and each compute host's disk endpoint (``disk_endpoint``)
are two uses of it. Refuses to know about the database: its callers say which names exist.
"""
