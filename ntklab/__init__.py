"""ntklab: neural-tangent-kernel and Hessian diagnostics — is your network in the linear regime, and why?"""

__version__ = "0.1.0"
