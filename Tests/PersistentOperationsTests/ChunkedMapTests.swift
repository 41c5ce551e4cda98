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
}
