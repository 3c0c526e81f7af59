# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A host-wide lock so that two MIG runs on one host never interleave.

The lock file lives in a folder only its owner may write (on a real host /run/gpufleet-mig, mode
0700, root's) and is opened without following symlinks: in a world-writable folder such as
/run/lock anyone could plant a symlink there and make a root run create or lock another file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import stat
import time

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError


class LockTimeout(GpufleetError):
    """The lock stayed held by another run for longer than allowed."""


class UnsafeLockPath(GpufleetError):
    """The lock's folder is not a real folder owned by this user and closed to others."""


class LockPermissionDenied(GpufleetError):
    """This user may not create or open the lock: on a real host it is root's."""


_DENIED = (errno.EACCES, errno.EPERM)


def _needs_root(path, reason):
    return LockPermissionDenied('cannot take the host lock at %s (%s): gpufleet.mig needs root on the managed host, '
                                'where the lock lives in a root-only folder; with Ansible, run the task with become: true'
                                % (path, reason))


def _safe_directory(directory):
    """Create the lock folder (0700) or check the existing one: a folder, ours, writable by nobody else."""
    if not os.path.lexists(directory):
        try:
            os.makedirs(directory, 0o700)
        except OSError as exc:
            if exc.errno in _DENIED:
                raise _needs_root(directory, 'permission denied creating its folder')
            if exc.errno != errno.EEXIST:
                raise
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeLockPath('lock folder %s is not a folder (a symlink?); refusing to use it' % directory)
    if info.st_uid == 0 and os.geteuid() != 0:
        raise _needs_root(directory, 'its folder belongs to root and this runs as uid %d' % os.geteuid())
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeLockPath('lock folder %s must belong to uid %d and be writable by nobody else (owner %d, mode %o)'
                             % (directory, os.geteuid(), info.st_uid, stat.S_IMODE(info.st_mode)))


class HostLock(object):
    """``flock`` on a lock file; shared for readers, exclusive for writers."""

    def __init__(self, path, timeout, exclusive=True, poll_interval=0.05):
        self.path = path
        self.timeout = timeout
        self.exclusive = exclusive
        self.poll_interval = poll_interval
        self._fd = None

    def __enter__(self):
        _safe_directory(os.path.dirname(os.path.abspath(self.path)))
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeLockPath('lock file %s is a symlink; refusing to follow it' % self.path)
            if exc.errno in _DENIED:
                raise _needs_root(self.path, 'permission denied opening it')
            raise
        mode = fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self._fd, mode | fcntl.LOCK_NB)
                return self
            except (IOError, OSError) as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                os.close(self._fd)
                self._fd = None
                raise LockTimeout('another gpufleet.mig run holds %s; gave up after %s seconds' % (self.path, self.timeout))
            time.sleep(self.poll_interval)

    def __exit__(self, exc_type, exc_value, tb):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        return False
