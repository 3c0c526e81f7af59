# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Where the API server is, for the event source gpufleet.mig.mig_pending_pods: its address, TLS settings and the
Authorization header of each request, from a kubeconfig (as the kubernetes Python client reads it) or the pod's
service account. The bearer token goes in the Authorization header only: never logged, never on a command line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import ssl

SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'


class SourceError(Exception):
    """A setting or an answer of the API server this source cannot work with (one line, no secret in it)."""


class Connection(object):
    """The API server's address, its TLS settings, and the Authorization header of the next request.

    ``authorization`` is called before each request: a kubeconfig's exec or auth-provider credential is
    refreshed there when it expired (the kubernetes client's refresh hook), a service account token re-read."""

    def __init__(self, server, authorization=None, ca_file=None, cert_file=None, key_file=None, insecure=False,
                 tls_server_name=None, proxy=None):
        self.server = server.rstrip('/')
        self.authorization = authorization or (lambda: None)
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self.insecure = insecure
        self.tls_server_name = tls_server_name
        self.proxy = proxy
        self._ssl = None

    def headers(self):
        value = self.authorization()
        return {'Authorization': value} if value else {}

    def ssl_context(self):
        """The TLS context of https servers (built once), None for plain http."""
        if not self.server.startswith('https:'):
            return None
        if self._ssl is None:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
            self._ssl = context
        return self._ssl

    def request_options(self):
        """aiohttp's per-request options beyond the URL: TLS context, the name to verify, the proxy."""
        options = {'ssl': self.ssl_context()}
        if self.tls_server_name:
            options['server_hostname'] = self.tls_server_name
        if self.proxy:
            options['proxy'] = self.proxy
        return options


def connection_from_kubeconfig(path, context_name=None):
    """A Connection from a kubeconfig file as the kubernetes Python client reads it (kubernetes-client/python
    kubernetes/config/kube_config.py, KubeConfigLoader: auth-provider (gcp, oidc), token and tokenFile, exec
    plugins (client.authentication.k8s.io ExecCredential: token or client certificate, re-run once its
    expirationTimestamp passed), username/password; certificate data written to private temporary files). The
    kubeconfig is not written back (persist_config=False)."""
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
    except ImportError:
        raise SourceError('reading kubeconfig %s needs the Python package kubernetes in the environment of '
                          'ansible-rulebook (pip install kubernetes); without a kubeconfig the source uses the pod\'s '
                          'service account' % path)
    configuration = k8s_client.Configuration()
    configuration.host = ''  # not the client's default (http://localhost): a kubeconfig without a server is refused
    try:
        k8s_config.load_kube_config(config_file=path, context=context_name, client_configuration=configuration,
                                    persist_config=False)
    except (k8s_config.ConfigException, EnvironmentError, ValueError, KeyError, TypeError) as exc:
        raise SourceError('kubeconfig %s: %s' % (path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if not configuration.host:
        raise SourceError('kubeconfig %s names no server for context %s' % (path, context_name or 'current-context'))

    def authorization():
        # The loader keeps "Bearer <token>" (or "Basic ...") under BearerToken; asking for it runs its refresh hook.
        # It keeps a tokenFile's final newline, which kubectl strips (client-go rest.Config's BearerTokenFile).
        value = configuration.get_api_key_with_prefix('BearerToken', alias='authorization')
        return value.strip() if value else None

    return Connection(configuration.host, authorization, ca_file=configuration.ssl_ca_cert,
                      cert_file=configuration.cert_file, key_file=configuration.key_file,
                      insecure=not configuration.verify_ssl, tls_server_name=getattr(configuration, 'tls_server_name', None),
                      proxy=configuration.proxy)


def connection_in_cluster(environ, account_dir=SERVICE_ACCOUNT_DIR):
    """The in-cluster connection (Kubernetes docs "Accessing the Kubernetes API from a Pod"), or None outside."""
    host, port = environ.get('KUBERNETES_SERVICE_HOST'), environ.get('KUBERNETES_SERVICE_PORT', '443')
    token_file = os.path.join(account_dir, 'token')
    if not host or not os.path.exists(token_file):
        return None
    host = '[%s]' % host if ':' in host else host

    def authorization():
        # Re-read on every request: projected service account tokens are rotated by the kubelet.
        with open(token_file) as handle:
            return 'Bearer ' + handle.read().strip()

    return Connection('https://%s:%s' % (host, port), authorization, ca_file=os.path.join(account_dir, 'ca.crt'))


def find_connection(args, environ):
    """The connection the arguments name: a kubeconfig (argument, $KUBECONFIG, ~/.kube/config), else in-cluster."""
    explicit = args.get('kubeconfig') or (environ.get('KUBECONFIG') or '').split(os.pathsep)[0]
    candidate = explicit or os.path.join(os.path.expanduser('~'), '.kube', 'config')
    if os.path.exists(candidate):
        return connection_from_kubeconfig(candidate, args.get('context') or None)
    if explicit:
        raise SourceError('kubeconfig %s does not exist' % explicit)
    conn = connection_in_cluster(environ)
    if conn is None:
        raise SourceError('no kubeconfig (argument kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod')
    return conn
