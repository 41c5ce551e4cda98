import Foundation
import Testing
@testable import PersistentOperations

@Suite("Chunked map: a large batch's encoding spread over the cores")
struct ChunkedMapTests {
    struct Failure: Error, Equatable { let index: Int }

    @Test(arguments: [0, 1, 255, 511, 512, 10_000, 10_007])
    func everyIndexIsTransformedOnceAndTheResultsKeepTheirOrder(count: Int) throws {
        let calls = Locked([Int](repeating: 0, count: count))
        let results = try ChunkedMap.map(count) { index in
            calls.withLock { $0[index] += 1 }
            return index * index
        }
        #expect(results == (0..<count).map { $0 * $0 })
        #expect(calls.withLock { $0 }.allSatisfy { $0 == 1 })
    }

    @Test func theErrorOfTheLowestFailingIndexIsThrown() {
        // Small chunks: the two failures fall in different chunks, which may run in any order
        for _ in 0..<20 {
            #expect(throws: Failure(index: 5)) {
                try ChunkedMap.map(1_000, minimumChunk: 10) { index -> Int in
                    if index == 5 || index == 999 { throw Failure(index: index) }
                    return index
                }
            }
        }
        // And on the calling thread alone, below two chunks' worth
        #expect(throws: Failure(index: 3)) {
            try ChunkedMap.map(100) { index -> Int in
                if index == 3 || index == 50 { throw Failure(index: index) }
                return index
            }
        }
    }

    @Test(arguments: [0, 1, 511, 512, 10_007])
    func chunksTakeEveryIndexOnceInOrder(count: Int) throws {
        let ranges = try ChunkedMap.mapChunks(count) { $0 }
        #expect(ranges.flatMap { Array($0) } == Array(0..<count))
        #expect(count < 2 * ChunkedMap.minimumChunk ? ranges.count == 1 : ranges.count > 1)
        #expect(throws: Failure(index: 1)) {
            try ChunkedMap.mapChunks(1_000, minimumChunk: 10) { range -> Int in
                if range.contains(1) || range.contains(998) { throw Failure(index: range.contains(1) ? 1 : 998) }
                return range.count
            }
        }
    }
}

@Suite("A batch frame built in pieces")
struct BatchFramePiecesTests {
    @Test(arguments: [0, 1, 3, 600, 5_000])
    func piecesAreTheBatchFrameTheyStandFor(count: Int) throws {
        // Given parts of varied lengths
        let parts = (0..<count).map { Data(repeating: UInt8($0 % 256), count: $0 % 37) }

        // When a batch frame is built in pieces (in several chunks from 512 parts on)
        let pieces = try JournalFrame.batchPieces(count) { parts[$0] }

        // Then, joined, they are the frame built whole: same body, same header, same size,
        // and each part's length in order
        let whole = JournalFrame.batch(parts)
        #expect(pieces.body.reduce(Data(), +) == whole.body)
        #expect(try pieces.header(salt: 0xABCD) == whole.header(salt: 0xABCD))
        #expect(pieces.size == whole.size)
        #expect(pieces.partLengths == parts.map(\.count))
        #expect(count < 2 * ChunkedMap.minimumChunk || pieces.body.count > 2)
    }

    @Test func aPartThatFailsToEncodeFailsTheFrame() {
        struct Failure: Error, Equatable {}
        #expect(throws: Failure()) {
            try JournalFrame.batchPieces(2_000) { index -> Data in
                if index == 1_500 { throw Failure() }
                return Data([1])
            }
        }
    }

    @Test func aFrameTooLargeIsRefusedByItsHeader() throws {
        let pieces = try JournalFrame.batchPieces(2) { _ in Data(count: 100) }
        #expect(throws: PersistenceError.self) { try pieces.header(salt: 1, maximumSize: pieces.size - 1) }
        #expect(try pieces.header(salt: 1, maximumSize: pieces.size).count == JournalFrame.headerSize)
    }
}
