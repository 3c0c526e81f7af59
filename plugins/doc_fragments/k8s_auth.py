# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """kubernetes.core's connection options, for the modules that call the API server themselves (their argument
    spec: k8s/_api_client.connection_argument_spec)."""

    DOCUMENTATION = r'''
options:
  kubeconfig:
    description: Path to a kubeconfig file, or its content as a dict (E(K8S_AUTH_KUBECONFIG)).
    type: raw
  context:
    description: The kubeconfig context (E(K8S_AUTH_CONTEXT)).
    type: str
  host:
    description: The API server URL (E(K8S_AUTH_HOST)).
    type: str
  api_key:
    description: A bearer token (E(K8S_AUTH_API_KEY)); never logged.
    type: str
  ca_cert:
    description: The API server's CA certificate file (E(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description: Verify the API server's certificate (E(K8S_AUTH_VERIFY_SSL)).
    type: bool
    aliases: [verify_ssl]
'''
