//! RoCEv2 wire formats (Ethernet, IPv4, UDP 4791, BTH and extension headers, ICRC).
