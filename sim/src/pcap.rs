//! pcap capture of the fabric's frames.
