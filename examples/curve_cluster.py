import os
import shutil
import subprocess
import sys
import tempfile

from scaler import Client, SchedulerClusterCombo

with tempfile.TemporaryDirectory() as keys:
    # a key pair for this client, as `scaler_keygen KEYS alice` writes it; its public key joins the authorized ones
    subprocess.run([sys.executable, "-m", "scaler.io.keygen", keys, "alice"], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(os.path.join(keys, "authorized"))
    shutil.copy(os.path.join(keys, "alice.key"), os.path.join(keys, "authorized"))

    # the scheduler's and workers' keys are made in `keys` too; every connection is authenticated and encrypted
    cluster = SchedulerClusterCombo(address="tcp://127.0.0.1:2345", n_workers=2, curve_keys_dir=keys)

    with Client(
        address=cluster.get_address(),
        curve_secret_key_file=os.path.join(keys, "alice.key_secret"),
        curve_server_key_file=cluster.curve_server_key_file,
    ) as client:
        print(client.submit(pow, 2, 10).result())  # 1024

    cluster.shutdown()
