package k8sio
