# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pack the test node's two images as docker-archive tarballs, with no registry and no Docker.

  build_images.py OUT_DIR PAUSE_BINARY BUSYBOX_BINARY PAUSE_NAME BUSYBOX_NAME

writes OUT_DIR/pause.tar (the static pause binary as /pause, the sandbox image containerd's
sandbox_image names) and OUT_DIR/busybox.tar (a statically linked busybox as /bin/busybox with
one symlink per applet, entrypoint-less, Cmd ["sh"]), each one layer, in the layout
`docker save` writes (manifest.json, the config blob, <digest>/layer.tar) that
`ctr images import` reads. Every tar entry has mtime 0 and uid/gid 0, so the same binaries give
the same image digests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile

_ARCHITECTURES = {'x86_64': 'amd64', 'aarch64': 'arm64', 'ppc64le': 'ppc64le', 's390x': 's390x'}


def _add_dir(tar, name, mode=0o755):
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    tar.addfile(info)


def _add_file(tar, name, data, mode=0o755):
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_symlink(tar, name, target):
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    tar.addfile(info)


def _layer(fill):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode='w', format=tarfile.USTAR_FORMAT) as tar:
        fill(tar)
    return buffer.getvalue()


def _read(path):
    with open(path, 'rb') as handle:
        return handle.read()


def pause_layer(binary):
    return _layer(lambda tar: _add_file(tar, 'pause', _read(binary)))


def busybox_layer(binary):
    applets = subprocess.check_output([binary, '--list']).decode().split()
    if 'sh' not in applets or 'sleep' not in applets:
        raise SystemExit('%s lacks the sh or sleep applet' % binary)

    def fill(tar):
        for directory in ('bin', 'dev', 'etc', 'proc', 'root', 'sys', 'var'):
            _add_dir(tar, directory)
        _add_dir(tar, 'tmp', 0o1777)
        _add_file(tar, 'bin/busybox', _read(binary))
        for applet in sorted(set(applets) - {'busybox'}):
            _add_symlink(tar, 'bin/' + applet, 'busybox')
        _add_file(tar, 'etc/passwd', b'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n', 0o644)
        _add_file(tar, 'etc/group', b'root:x:0:\nnogroup:x:65534:\n', 0o644)

    return _layer(fill)


def write_archive(path, name, layer, config):
    """One docker-archive tarball: manifest.json, the image config, one layer."""
    layer_digest = hashlib.sha256(layer).hexdigest()
    image_config = {
        'architecture': _ARCHITECTURES.get(platform.machine(), platform.machine()),
        'os': 'linux',
        'created': '1970-01-01T00:00:00Z',
        'config': config,
        'rootfs': {'type': 'layers', 'diff_ids': ['sha256:' + layer_digest]},
        'history': [{'created': '1970-01-01T00:00:00Z', 'created_by': 'tests/cluster/images/build_images.py'}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + '.json'
    manifest = [{'Config': config_name, 'RepoTags': [name], 'Layers': [layer_digest + '/layer.tar']}]
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as tar:
        _add_dir(tar, layer_digest)
        _add_file(tar, layer_digest + '/layer.tar', layer, 0o644)
        _add_file(tar, config_name, config_bytes, 0o644)
        _add_file(tar, 'manifest.json', json.dumps(manifest).encode(), 0o644)


def main(argv):
    if len(argv) != 5:
        raise SystemExit(__doc__)
    out_dir, pause_binary, busybox_binary, pause_name, busybox_name = argv
    os.makedirs(out_dir, exist_ok=True)
    write_archive(os.path.join(out_dir, 'pause.tar'), pause_name, pause_layer(pause_binary),
                  {'Entrypoint': ['/pause'], 'Env': ['PATH=/']})
    write_archive(os.path.join(out_dir, 'busybox.tar'), busybox_name, busybox_layer(busybox_binary),
                  {'Cmd': ['sh'], 'Env': ['PATH=/bin']})


if __name__ == '__main__':
    main(sys.argv[1:])
