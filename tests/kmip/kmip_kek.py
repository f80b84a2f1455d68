"""A KEK command for walcrypt backed by a KMIP server (PyKMIP's client).

    kmip_kek.py create      creates an AES-256 key on the server and prints its id
    kmip_kek.py get ID      prints key ID as 64 hex digits (walcrypt's KekCommand reads this)

Used by tests/kek_command_against_a_kmip_server.rs (opt-in). To run it against a local PyKMIP
server (`pip install pykmip`; loopback only):

    D=/tmp/kmip; mkdir -p $D/policies; cd $D
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=ca
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
    printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \\
        -out server.crt -days 2 -extfile server.ext
    openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=walcrypt
    printf 'extendedKeyUsage=clientAuth\\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial \\
        -out client.crt -days 2 -extfile client.ext
    printf '[server]\\nhostname=127.0.0.1\\nport=15696\\ncertificate_path=%s/server.crt\\n' $D > server.conf
    printf 'key_path=%s/server.key\\nca_path=%s/ca.crt\\nauth_suite=TLS1.2\\n' $D $D >> server.conf
    printf 'policy_path=%s/policies\\nenable_tls_client_auth=False\\n' $D >> server.conf
    printf 'database_path=%s/pykmip.db\\n' $D >> server.conf
    printf '[client]\\n' > client.conf
    pykmip-server -f $D/server.conf -l $D/server.log &

Environment: KMIP_DIR (default /tmp/kmip) holds client.crt, client.key, ca.crt, client.conf;
KMIP_PORT (default 15696). Nothing but the key is ever printed on standard output.
"""
import os
import sys
import warnings

warnings.filterwarnings("ignore")
from kmip import enums  # noqa: E402
from kmip.pie.client import ProxyKmipClient  # noqa: E402

d = os.environ.get("KMIP_DIR", "/tmp/kmip")
client = ProxyKmipClient(
    hostname="127.0.0.1",
    port=int(os.environ.get("KMIP_PORT", "15696")),
    cert=os.path.join(d, "client.crt"),
    key=os.path.join(d, "client.key"),
    ca=os.path.join(d, "ca.crt"),
    config_file=os.path.join(d, "client.conf"),
)
with client:
    if sys.argv[1] == "create":
        uid = client.create(enums.CryptographicAlgorithm.AES, 256)
        client.activate(uid)
        print(uid)
    else:
        key = client.get(sys.argv[2])
        sys.stdout.write(key.value.hex() + "\n")
