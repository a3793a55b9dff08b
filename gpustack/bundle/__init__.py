"""Air-gapped bundles: ``gpustack bundle create`` fetches every artifact a run needs into a
directory on a connected machine; ``gpustack up --bundle DIR`` verifies it and serves it to the
nodes, which then need no route out.

    want.py      what a bundle must hold for a config (pure)
    manifest.py  bundle.json: every artifact with its sha256 / digest; verification (pure + hashing)
    fetch.py     HTTP downloads verified as they arrive, never half a file under its final name
    registry.py  OCI distribution client: images as OCI archives for ``ctr images import``
    apt.py       apt packages resolved by apt itself, into signed flat repositories
    create.py    ``bundle create``: the above, resumable
    serve.py     the run-lifetime HTTP server ``up --bundle`` starts
    use.py       ``up --bundle``: verification, config and playbook variables pointing at the server
"""

from __future__ import annotations

#: the playbook variables a bundle adds to a run (``bundle.use.bundle_extravars``; it also turns
#: ``gpustack_apt_update_cache`` off): the plans of the commands that take ``--bundle`` declare them
PLAYBOOK_VARS = ("gpustack_bundle_os_repos", "gpustack_bundle_images", "gpustack_bundle_host")
