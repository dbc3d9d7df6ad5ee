"""Remote inference: `egomimic-policy-server` (server.py) and the RemotePolicy client
(client.py) over pyzmq ROUTER/DEALER with msgpack (wire.py, protocol.py). The client needs
no torch: it imports numpy, pyzmq and msgpack only."""
