//! M-Lab's ndt7 speed test: the server (`goodput server --ndt7`, the
//! agent's beacon) and the client (`goodput ndt7`). The messages, the
//! `TCP_INFO` mapping and the figures are core's (`goodput_core::ndt7`);
//! the WebSocket is tungstenite's; here is the I/O.

pub mod client;
pub mod server;

use std::os::fd::RawFd;

use goodput_core::ndt7::TcpInfo;

/// The kernel's `TCP_INFO` of socket `fd`, read `elapsed_us` into a
/// subtest, in ndt7's names; `None` when the kernel refuses.
pub(crate) fn read_tcp_info(fd: RawFd, elapsed_us: i64) -> Option<TcpInfo> {
    // Larger than any kernel's struct tcp_info so far (232 bytes in 5.x,
    // 280 in 6.x): the kernel writes what it has and says how much.
    let mut raw = [0u8; 512];
    let mut len = raw.len() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `raw` and sets
    // `len` to the bytes written; a closed or foreign fd is an error return.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let len = (len as usize).min(raw.len());
    Some(TcpInfo::from_kernel(&raw[..len], elapsed_us))
}

/// The WebSocket settings of one end: a message (and a frame) no larger
/// than `max_message`, and a write buffer no larger than one message and
/// a little, so a peer that stops reading holds no more than that.
pub(crate) fn ws_config(max_message: usize) -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message))
        .write_buffer_size(128 << 10)
        .max_write_buffer_size(max_message + (256 << 10))
}
