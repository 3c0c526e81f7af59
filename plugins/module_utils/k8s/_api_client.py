# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The kubernetes Python client's Configuration from kubernetes.core's connection options, for the modules that
call the API server themselves (mig_pod_eviction, mig_fleet_lease). No Ansible imports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
except ImportError:
    KUBERNETES_ERROR = traceback.format_exc()
else:
    KUBERNETES_ERROR = None


def connection_argument_spec(env_fallback):
    """kubernetes.core's connection options (the same names, aliases and K8S_AUTH_* environment variables as its
    plugins/module_utils/args_common.py AUTH_ARG_SPEC), documented by the gpufleet.mig.k8s_auth doc fragment.
    ``env_fallback`` is Ansible's (ansible.module_utils.basic): this file imports no Ansible."""
    return dict(
        kubeconfig=dict(type='raw', no_log=True, fallback=(env_fallback, ['K8S_AUTH_KUBECONFIG'])),
        context=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_CONTEXT'])),
        host=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_HOST'])),
        api_key=dict(type='str', no_log=True, fallback=(env_fallback, ['K8S_AUTH_API_KEY'])),
        ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=(env_fallback, ['K8S_AUTH_SSL_CA_CERT'])),
        validate_certs=dict(type='bool', aliases=['verify_ssl'], fallback=(env_fallback, ['K8S_AUTH_VERIFY_SSL'])),
    )


def configuration(params):
    """A client Configuration from kubernetes.core's connection options, resolved as kubernetes.core does
    (kubernetes.core plugins/module_utils/k8s/client.py, _create_configuration)."""
    conf = k8s_client.Configuration()
    kubeconfig, context = params.get('kubeconfig'), params.get('context')
    if params.get('host') and params.get('api_key'):
        pass
    elif kubeconfig or context:
        _load_kubeconfig(kubeconfig, context, conf)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=conf)
        except k8s_config.ConfigException:
            _load_kubeconfig(None, None, conf)
    if params.get('host'):
        conf.host = params['host'].rstrip('/')
    if params.get('api_key'):
        conf.api_key = {'authorization': 'Bearer %s' % params['api_key']}
    if params.get('ca_cert'):
        conf.ssl_ca_cert = params['ca_cert']
    if params.get('validate_certs') is not None:
        conf.verify_ssl = params['validate_certs']
    return conf


def _load_kubeconfig(kubeconfig, context, conf):
    if isinstance(kubeconfig, dict):
        k8s_config.load_kube_config_from_dict(config_dict=kubeconfig, context=context, client_configuration=conf)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=conf)
