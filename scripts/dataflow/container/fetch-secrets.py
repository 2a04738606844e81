"""Copies Secret Manager secrets into files before aipo's worker starts.

AIPO_SECRETS lists secret names, separated by spaces; each is read at its
latest version from the worker VM's project with the VM's service account
(which needs roles/secretmanager.secretAccessor on them) and written to
AIPO_SECRETS_DIR/NAME (default /run/aipo/secrets), mode 0400. A name may be
a full resource name, projects/P/secrets/NAME, to read another project's.
Values are never printed. Any failure stops the container, so a worker
never starts without its credentials.
"""

import base64
import json
import os
import sys
import urllib.request

METADATA = "http://metadata.google.internal/computeMetadata/v1/"
SECRETS_API = "https://secretmanager.googleapis.com/v1/"


def metadata(path):
    req = urllib.request.Request(METADATA + path, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def main():
    names = os.environ.get("AIPO_SECRETS", "").split()
    if not names:
        return
    out = os.environ.get("AIPO_SECRETS_DIR", "/run/aipo/secrets")
    os.makedirs(out, mode=0o700, exist_ok=True)
    token = json.loads(metadata("instance/service-accounts/default/token"))["access_token"]
    project = metadata("project/project-id").strip()
    for name in names:
        resource = name if name.startswith("projects/") else "projects/%s/secrets/%s" % (project, name)
        req = urllib.request.Request(
            SECRETS_API + resource + "/versions/latest:access",
            headers={"Authorization": "Bearer " + token},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                payload = json.loads(r.read().decode())["payload"]["data"]
        except Exception as e:  # the message names the secret, not its value
            sys.exit("fetch-secrets: reading secret %s failed: %s" % (resource, e))
        path = os.path.join(out, resource.rsplit("/", 1)[-1])
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(payload))
        print("fetch-secrets: wrote %s" % path, file=sys.stderr)


if __name__ == "__main__":
    main()
