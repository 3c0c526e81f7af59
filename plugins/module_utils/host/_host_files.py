# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The files gpufleet.mig keeps on a host: where they go (:class:`HostPaths`), each written atomically and only
when its content differs (sha256).

What nvidia_mig_layout installs there for the boot is _boot_install. No Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import tempfile

LAYOUT_FILE = 'layout.json'
METRICS_FILE = 'gpufleet_mig.prom'
SCRIPT_NAME = 'gpufleet-mig-apply'
# Where systemd's sd_booted() looks, then what runs as PID 1: how Ansible's service_mgr fact tells systemd
# (ansible-core lib/ansible/module_utils/facts/system/service_mgr.py, ServiceMgrFactCollector.is_systemd_managed
# and its /proc/1/comm read). A container (the GPU operator's way) has neither.
SYSTEMD_CANARIES = ('/run/systemd/system/', '/dev/.run/systemd/', '/dev/.systemd/')
PID1_COMM = '/proc/1/comm'


# Where systemctl enable puts a unit's links (its [Install] target's .wants or .requires folder) and where a unit that
# runs keeps its invocation id (systemd >= 232, /run/systemd/units/invocation:<unit>): read, not asked, by a decision,
# which never calls systemctl (the apply asks systemctl again before it changes anything).
UNIT_FOLDERS = ('/etc/systemd/system', '/run/systemd/system', '/usr/lib/systemd/system', '/lib/systemd/system')
RUNNING_UNITS = '/run/systemd/units'


def unit_enabled_on_disk(unit, folders):
    """Whether a .wants or .requires folder of ``folders`` links ``unit`` (what systemctl enable leaves)."""
    for folder in folders:
        try:
            names = os.listdir(folder)
        except (IOError, OSError):
            continue
        for name in names:
            if name.endswith(('.wants', '.requires')) and os.path.lexists(os.path.join(folder, name, unit)):
                return True
    return False


def unit_running_on_disk(unit):
    """Whether systemd keeps an invocation id for ``unit`` (it runs, or ran and was not collected yet)."""
    return os.path.lexists(os.path.join(RUNNING_UNITS, 'invocation:%s' % unit))


def systemd_runs():
    """Whether systemd manages this host: one of its canary folders exists, or PID 1 is systemd."""
    if any(os.path.exists(path) for path in SYSTEMD_CANARIES):
        return True
    try:
        with open(PID1_COMM) as handle:
            return handle.read().strip() == 'systemd'
    except (IOError, OSError):
        return False


class HostPaths(object):
    """Where the host's files go (module options; the simulated fleet points them into a state folder)."""

    def __init__(self, config_dir, lib_dir, bin_dir, systemd_dir, metrics_dir, python, environment, pod_resources_socket=None):
        self.config_dir = config_dir
        self.lib_dir = lib_dir
        self.bin_dir = bin_dir
        self.systemd_dir = systemd_dir
        self.metrics_dir = metrics_dir
        self.python = python
        self.environment = dict(environment or {})
        # The metrics timer names the pods that hold instances where the kubelet can be asked.
        self.pod_resources_socket = pod_resources_socket

    @property
    def layout_file(self):
        return os.path.join(self.config_dir, LAYOUT_FILE)

    @property
    def script(self):
        return os.path.join(self.bin_dir, SCRIPT_NAME)

    @property
    def metrics_file(self):
        return os.path.join(self.metrics_dir, METRICS_FILE) if self.metrics_dir else None


def _digest(data):
    return hashlib.sha256(data).hexdigest()


def differs(path, content):
    """Whether ``path`` is missing or holds other content (compared by sha256)."""
    try:
        with open(path, 'rb') as handle:
            return _digest(handle.read()) != _digest(content.encode('utf-8'))
    except (IOError, OSError):
        return True


def sync(files, check_mode):
    """Write each (path, content, mode) whose content differs; returns the paths that (would) change."""
    changed = []
    for path, content, mode in files:
        if differs(path, content):
            changed.append(path)
            if not check_mode:
                write_atomically(path, content, mode)
    return changed


def write_atomically(path, content, mode=0o644):
    """Write ``content`` to ``path`` through a temp file in the same folder and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    fd, temp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(content)
        os.chmod(temp, mode)
        os.rename(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
