import Dispatch
import Foundation

/// A map over many elements split into chunks that run on the processor's cores at once:
/// how a large `addOperations` encodes its payloads and records.
///
/// Fewer than two chunks' worth of elements stay on the calling thread, where splitting would
/// cost more than it saves.
///
/// ```swift
/// let squares = try ChunkedMap.map(10_000) { $0 * $0 }
/// // squares[9_999] == 99_980_001, computed in chunks spread over the active cores.
/// ```
package enum ChunkedMap {
    /// The fewest elements a chunk takes.
    package static let minimumChunk = 256

    /// The active cores, read once (on Linux, asking reads files under `/proc` and `/sys`).
    private static let cores = ProcessInfo.processInfo.activeProcessorCount

    /// `transform` of each range of indexes the chunks of `0..<count` take, in order (one
    /// range, `0..<count`, for fewer than two chunks' worth), as ``map(_:minimumChunk:_:)``
    /// splits them: for work that gathers a chunk's elements into one value (a buffer, rather
    /// than a buffer an element). Errors as ``map(_:minimumChunk:_:)``'s.
    ///
    /// ```swift
    /// let sums = try ChunkedMap.mapChunks(10_000) { range in range.reduce(0, +) }
    /// // sums.reduce(0, +) == 49_995_000, whatever the number of chunks.
    /// ```
    package static func mapChunks<T: Sendable>(
        _ count: Int, minimumChunk: Int = minimumChunk, _ transform: @Sendable (Range<Int>) throws -> T
    ) throws -> [T] {
        let chunks = chunkCount(count, minimumChunk: minimumChunk)
        return try map(chunks, minimumChunk: 1) { chunk in
            try transform(range(ofChunk: chunk, of: chunks, count: count))
        }
    }

    /// `transform` of each index in `0..<count`, in index order. When transforms throw, the
    /// error of the lowest index is thrown; the other chunks may have run meanwhile, and a
    /// chunk stops at its first error.
    ///
    /// `transform` runs on several threads at once: it must be safe to call concurrently.
    package static func map<T: Sendable>(
        _ count: Int, minimumChunk: Int = minimumChunk, _ transform: @Sendable (Int) throws -> T
    ) throws -> [T] {
        let chunks = chunkCount(count, minimumChunk: minimumChunk)
        guard chunks > 1 else { return try (0..<count).map(transform) }
        var values = [T?](repeating: nil, count: count)
        var failures = [(index: Int, error: any Error)?](repeating: nil, count: chunks)
        values.withUnsafeMutableBufferPointer { values in
            failures.withUnsafeMutableBufferPointer { failures in
                // Each chunk writes only its own elements of both.
                let slots = Slots(values: values, failures: failures)
                DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
                    for index in range(ofChunk: chunk, of: chunks, count: count) {
                        do {
                            slots.values[index] = try transform(index)
                        } catch {
                            slots.failures[chunk] = (index, error)
                            return
                        }
                    }
                }
            }
        }
        if let first = failures.lazy.compactMap({ $0 }).min(by: { $0.index < $1.index }) { throw first.error }
        return values.map { $0! }
    }

    /// How many chunks `count` elements are split into: one below two chunks' worth, else four
    /// a core (a thread that joins late still takes a share, and one that is slowed down holds
    /// up less of the whole), each of `minimumChunk` elements at least.
    private static func chunkCount(_ count: Int, minimumChunk: Int) -> Int {
        count >= 2 * minimumChunk ? min(4 * cores, count / max(1, minimumChunk)) : 1
    }

    /// The indexes chunk `chunk` of `chunks` takes of `0..<count`: its share, the first chunks
    /// one more.
    private static func range(ofChunk chunk: Int, of chunks: Int, count: Int) -> Range<Int> {
        let size = count / chunks, extra = count % chunks
        let start = chunk * size + min(chunk, extra)
        return start..<(start + size + (chunk < extra ? 1 : 0))
    }

    /// The buffers the chunks write, each chunk its own elements.
    private struct Slots<T>: @unchecked Sendable {
        let values: UnsafeMutableBufferPointer<T?>
        let failures: UnsafeMutableBufferPointer<(index: Int, error: any Error)?>
    }
}
