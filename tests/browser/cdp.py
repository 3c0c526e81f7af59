# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Headless Chromium driven over the Chrome DevTools Protocol, standard library only.

The browser is started with ``--remote-debugging-pipe``: it reads CDP messages on fd 3 and
writes its answers and events on fd 4, each message one JSON text ending in a NUL byte.
Everything the page asks for is logged from the Network domain's events; name resolution
is switched off (``--host-resolver-rules``), so a page that tried to load something from
the network would fail to, and still show up in that log.
"""

from __future__ import absolute_import, division, print_function

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

from ansible_collections.gpufleet.mig.tests.support.debian import PackageInstallError, install_debian_packages

CHROMIUM_NAMES = ('chromium', 'chromium-browser')
APT_PACKAGES = ('chromium', 'fonts-dejavu-core')
_CHILD_FD_FLOOR = 10   # the child's pipe ends live above 3 and 4 until they are moved there


class BrowserError(RuntimeError):
    """The browser could not be had, did not answer, or answered with an error."""


def find_chromium():
    """Path of the Chromium binary ($CHROMIUM_BIN wins), or None."""
    override = os.environ.get('CHROMIUM_BIN')
    if override:
        return override if os.access(override, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium():
    """Chromium's path; installs Debian's package with apt-get when it is missing. Returns (path, seconds spent installing)."""
    path = find_chromium()
    if path:
        return path, 0.0
    try:
        seconds = install_debian_packages(APT_PACKAGES, 'Chromium')
    except PackageInstallError as exc:
        raise BrowserError('%s (or set CHROMIUM_BIN)' % exc)
    path = find_chromium()
    if not path:
        raise BrowserError('apt-get installed %s but no chromium binary is on PATH' % ' '.join(APT_PACKAGES))
    return path, seconds


class Chromium(object):
    """One headless Chromium process and its CDP pipe. Use as a context manager: the process group is always killed."""

    def __init__(self, binary, window=(1280, 900), timeout=60.0):
        self.binary = binary
        self.window = window
        self.timeout = timeout
        self.process = None
        self.profile_dir = None
        self.events = []
        self._next_id = 0
        self._buffer = b''
        self._to_browser = None
        self._from_browser = None
        self.log_path = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.close()

    def start(self):
        self.profile_dir = tempfile.mkdtemp(prefix='gpufleet-chromium-')
        self.log_path = os.path.join(self.profile_dir, 'chromium.log')
        command = [
            self.binary, '--headless', '--remote-debugging-pipe', '--user-data-dir=%s' % self.profile_dir,
            '--no-first-run', '--no-default-browser-check', '--disable-gpu', '--disable-dev-shm-usage',
            '--disable-extensions', '--disable-background-networking', '--disable-component-update', '--disable-sync',
            '--disable-default-apps', '--mute-audio', '--hide-scrollbars', '--force-color-profile=srgb',
            # no name resolves: nothing can be fetched from the network, and any attempt is logged
            '--host-resolver-rules=MAP * ~NOTFOUND',
            '--window-size=%d,%d' % self.window,
        ]
        if os.geteuid() == 0:
            command.append('--no-sandbox')   # Chromium's sandbox refuses to run as root
        command.append('about:blank')
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        # dup2 onto 3 and 4 in the child must not overwrite the other end: keep both well above
        child_read = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD_CLOEXEC, _CHILD_FD_FLOOR)
        child_write = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD_CLOEXEC, _CHILD_FD_FLOOR)
        os.close(to_browser_read)
        os.close(from_browser_write)

        def give_pipe_fds():
            os.dup2(child_read, 3)    # dup2 clears close-on-exec: Chromium inherits exactly 3 and 4
            os.dup2(child_write, 4)

        log = open(self.log_path, 'wb')
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            preexec_fn=give_pipe_fds, close_fds=False, start_new_session=True)
        finally:
            log.close()
            os.close(child_read)
            os.close(child_write)
        self.call('Browser.getVersion')

    def close(self):
        """Ask the browser to quit, then kill its process group whatever happened; remove the profile."""
        try:
            if self.process is not None and self.process.poll() is None:
                try:
                    self._send('Browser.close', {}, None)
                    self.process.wait(timeout=5)
                except (BrowserError, OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            if self.process is not None:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)   # its own session: renderers and zygotes too
                except (ProcessLookupError, PermissionError):
                    pass
                self.process.wait()
            for fd in (self._to_browser, self._from_browser):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self._to_browser = self._from_browser = None
            if self.profile_dir:
                shutil.rmtree(self.profile_dir, ignore_errors=True)

    def log_tail(self):
        try:
            with open(self.log_path, 'rb') as handle:
                return handle.read()[-2000:].decode('utf-8', 'replace')
        except (IOError, OSError, TypeError):
            return ''

    def _send(self, method, params, session_id):
        self._next_id += 1
        message = {'id': self._next_id, 'method': method, 'params': params or {}}
        if session_id:
            message['sessionId'] = session_id
        data = json.dumps(message).encode('utf-8') + b'\0'
        try:
            while data:
                written = os.write(self._to_browser, data)
                data = data[written:]
        except OSError as exc:
            raise BrowserError('cannot send %s to Chromium (%s); its log:\n%s' % (method, exc, self.log_tail()))
        return self._next_id

    def _read_message(self, deadline):
        while b'\0' not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError('Chromium did not answer within %.0f s; its log:\n%s' % (self.timeout, self.log_tail()))
            ready, dummy, dummy = select.select([self._from_browser], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError('Chromium closed its DevTools pipe (exit %s); its log:\n%s'
                                   % (self.process.poll(), self.log_tail()))
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b'\0', 1)
        return json.loads(raw.decode('utf-8'))

    def call(self, method, params=None, session_id=None):
        """Send one command and wait for its result; events that arrive meanwhile go to ``self.events``."""
        message_id = self._send(method, params, session_id)
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if message.get('id') == message_id:
                if 'error' in message:
                    raise BrowserError('%s failed: %s' % (method, message['error']))
                return message.get('result', {})
            if 'method' in message:
                self.events.append(message)

    def wait_for_event(self, method, session_id=None):
        """The first event ``method`` (of ``session_id``) seen so far or arriving within the timeout."""
        deadline = time.monotonic() + self.timeout
        position = 0
        while True:
            for event in self.events[position:]:
                if event['method'] == method and (session_id is None or event.get('sessionId') == session_id):
                    return event
            position = len(self.events)
            message = self._read_message(deadline)
            if 'method' in message:
                self.events.append(message)

    def open_page(self, url, width=None):
        """A new tab (``width`` CSS pixels wide, the window's by default) with the Network and Page domains on,
        loaded with ``url``: (session id, requests seen)."""
        target = self.call('Target.createTarget', {'url': 'about:blank'})['targetId']
        session = self.call('Target.attachToTarget', {'targetId': target, 'flatten': True})['sessionId']
        self.call('Network.enable', {}, session)
        self.call('Page.enable', {}, session)
        metrics = {'width': width or self.window[0], 'height': self.window[1], 'deviceScaleFactor': 1, 'mobile': False}
        self.call('Emulation.setDeviceMetricsOverride', metrics, session)
        first_event = len(self.events)
        navigation = self.call('Page.navigate', {'url': url}, session)
        if navigation.get('errorText'):
            raise BrowserError('navigation to %s failed: %s' % (url, navigation['errorText']))
        self.wait_for_event('Page.loadEventFired', session)
        # a late request (font, image) would still be logged: let the page settle briefly
        self.call('Runtime.evaluate', {'expression': 'new Promise(r => setTimeout(r, 300))', 'awaitPromise': True}, session)
        return session, self.requests(session, first_event)

    def requests(self, session, since=0):
        """URLs the page asked for (Network.requestWillBeSent), in order."""
        return [e['params']['request']['url'] for e in self.events[since:]
                if e['method'] == 'Network.requestWillBeSent' and e.get('sessionId') == session]

    def evaluate(self, session, expression):
        result = self.call('Runtime.evaluate', {'expression': expression, 'returnByValue': True, 'awaitPromise': True}, session)
        if 'exceptionDetails' in result:
            raise BrowserError('script failed: %s' % json.dumps(result['exceptionDetails'])[:2000])
        return result['result'].get('value')

    def screenshot(self, session):
        """PNG bytes of the whole page (not just the viewport)."""
        metrics = self.call('Page.getLayoutMetrics', {}, session)
        size = metrics.get('cssContentSize') or metrics['contentSize']
        clip = {'x': 0, 'y': 0, 'width': size['width'], 'height': size['height'], 'scale': 1}
        data = self.call('Page.captureScreenshot', {'format': 'png', 'captureBeyondViewport': True, 'clip': clip}, session)
        return base64.b64decode(data['data'])
