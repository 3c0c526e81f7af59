# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A host-wide lock so that two MIG runs on one host never interleave."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import time


class LockTimeout(Exception):
    """The lock stayed held by another run for longer than allowed."""


class HostLock(object):
    """``flock`` on a lock file; shared for readers, exclusive for writers."""

    def __init__(self, path, timeout, exclusive=True, poll_interval=0.05):
        self.path = path
        self.timeout = timeout
        self.exclusive = exclusive
        self.poll_interval = poll_interval
        self._fd = None

    def __enter__(self):
        directory = os.path.dirname(self.path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
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
