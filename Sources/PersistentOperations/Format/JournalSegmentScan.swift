import Foundation

/// What ``JournalSegment/scan(_:maximumFrameSize:)`` found in a segment: the frames that
/// verified and the byte ranges that did not.
///
/// The header (when valid), ``frames``, ``corruptRegions``, ``tornTail`` and ``unusedTail``
/// cover every byte of the segment exactly once, in order.
///
/// ```swift
/// let bytes = JournalSegment.header(salt: JournalSegment.newSalt(), number: 1)
/// let scan = try JournalSegment.scan(bytes)
/// for located in scan.frames { print("apply", located.frame.kind) }
/// for region in scan.corruptRegions { print("quarantine", bytes[region.range].count, "bytes:", region.reason) }
/// if let tail = scan.tornTail, scan.header != nil { print("truncate to", tail.offset) }
/// ```
package struct JournalSegmentScan: Sendable, Equatable {
    /// A frame that verified, and where it starts in the segment.
    package struct LocatedFrame: Sendable, Equatable {
        /// The frame.
        package var frame: JournalFrame
        /// The offset of its first byte.
        package var offset: Int

        /// The bytes it takes in the segment.
        package var range: Range<Int> { offset..<(offset + frame.size) }
    }

    /// A run of bytes that are not part of a valid header or frame.
    package struct Region: Sendable, Equatable {
        /// The offset of its first byte.
        package var offset: Int
        /// Its length in bytes.
        package var count: Int
        /// Why its first bytes are not a frame (or not a segment header), for reports.
        package var reason: String

        /// The bytes it covers.
        package var range: Range<Int> { offset..<(offset + count) }
    }

    /// The segment header, `nil` when it is damaged or missing; the damage is then the start
    /// of the first corrupt region, or of the torn tail.
    package var header: JournalSegment.Header?
    /// The frames that verified, in segment order.
    package var frames: [LocatedFrame] = []
    /// Damaged runs of bytes followed by a valid frame, in order: to keep in quarantine.
    package var corruptRegions: [Region] = []
    /// The damaged run of bytes at the end, if any: the frame being written when a crash
    /// struck, or any damage after the last valid frame. A store truncates the segment at its
    /// offset before appending again (when ``header`` is `nil` the file is not known to be a
    /// segment at all, and truncating it to nothing is the store's decision).
    package var tornTail: Region?
    /// Zeros after the last valid frame, to the end, in a segment whose header is valid: space
    /// the writer filled ahead of its frames (see ``JournalWriter``), which no frame reached.
    /// Not damage; a store appends at its offset.
    package var unusedTail: Region?

    /// Where the valid part of the segment ends: the torn tail's or the unused tail's offset,
    /// or the end.
    package func validEnd(segmentSize: Int) -> Int {
        tornTail?.offset ?? unusedTail?.offset ?? segmentSize
    }
}
